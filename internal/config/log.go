package config

import (
	"io"
	"log/slog"
)

// NewLogger writes to w in format, "text" or "json", as log_format allows,
// at level, which a reload may change.
func NewLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		// slog's JSON handler writes a duration as integer nanoseconds,
		// which no reader of a log takes in at a glance; the text
		// handler already writes "1.5ms", and so does this one now.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
