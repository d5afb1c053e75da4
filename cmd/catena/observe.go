package main

import (
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/catena-kv/catena/internal/cli"
)

// logFlags are the logging flags of every long-running process (master,
// server, dev, proxy): register them with registerLogFlags and build the
// process's logger with logger.
type logFlags struct {
	level  slog.Level
	format string
}

// registerLogFlags defines -log-level and -log-format on fs.
func registerLogFlags(fs *flag.FlagSet) *logFlags {
	f := &logFlags{}
	fs.TextVar(&f.level, "log-level", slog.LevelInfo, "least severe log records written: debug, info, warn or error")
	fs.StringVar(&f.format, "log-format", "text", "log record format: text (key=value pairs) or json (one object per line)")
	return f
}

// logger returns the process's structured logger: records at the level
// given or above, written to stderr in the format given, each tagged
// with node=name.
func (f *logFlags) logger(name string) (*slog.Logger, error) {
	h, err := f.handler(os.Stderr)
	if err != nil {
		return nil, err
	}
	return slog.New(h).With("node", name), nil
}

// handler returns a handler writing to w at the level and in the format
// given.
func (f *logFlags) handler(w io.Writer) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: f.level}
	switch f.format {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, cli.UsageErrorf("-log-format %q: want text or json", f.format)
}

// args returns the flags that give a child process the same logging.
func (f *logFlags) args() []string {
	return []string{"-log-level", f.level.String(), "-log-format", f.format}
}

// registerHTTPFlag defines -http on fs: the address of the process's
// HTTP listener, off by default. serves says what it serves.
func registerHTTPFlag(fs *flag.FlagSet, serves string) *string {
	return fs.String("http", "", "address to serve "+serves+" over HTTP on (host:port), HTTPS with the process's certificate when -tls-cert is given; empty: no HTTP")
}
