// Package logging builds the slog.Logger of every EpochFS command from its
// --log-format and --log-level flags, so that the commands accept the same
// values and report bad ones the same way.
//
// It knows nothing about what is logged; it must not import other EpochFS
// packages.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w in format ("text" or "json", any case)
// at level ("debug", "info", "warn" or "error", any case, as
// slog.Level.UnmarshalText reads it). Its errors name the flag that was
// wrong: --log-format or --log-level.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
