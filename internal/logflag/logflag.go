// Package logflag is the --log-level and --log-format flags that every
// Quire server and command takes: they set log/slog's default logger, as
// text for a person at a terminal or as JSON lines for a log pipeline.
package logflag

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/quire-dev/quire/internal/env"
)

// Flags are the logging flags' values.
type Flags struct {
	Level, Format string
}

// Register adds --log-level and --log-format to fs, with their defaults
// from QUIRE_LOG_LEVEL and QUIRE_LOG_FORMAT.
func (f *Flags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Level, "log-level", env.Or("QUIRE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env QUIRE_LOG_LEVEL)")
	fs.StringVar(&f.Format, "log-format", env.Or("QUIRE_LOG_FORMAT", "text"), "log format: text, or json for one JSON object a line (env QUIRE_LOG_FORMAT)")
}

// Logger is the logger the flags ask for, writing to w.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.Format)
}
