// Command quire is Quire's one binary: its servers, an all-in-one
// development cluster, and the command-line interface for operators.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	err := newRootCommand().Execute()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "quire:", err)
	var u usageError
	if errors.As(err, &u) {
		os.Exit(2)
	}
	os.Exit(1)
}

// usageError marks an error in what the user gave (flags, files, specs):
// the process exits with code 2 and prints nothing to standard output.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}
