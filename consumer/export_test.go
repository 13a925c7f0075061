package consumer

// SetTakeOverHook sets the function called before each attempt of a
// takeover of a recovery log, until the returned reset is called.
func SetTakeOverHook(fn func(shard string, attempt int)) (reset func()) {
	takeOverHook.Store(&fn)
	return resetTakeOverHook
}
