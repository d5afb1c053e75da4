package main

import (
	"bufio"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// parseFlags parses args into fs, then fills every flag not given on the
// command line from the file named by -config, if any. The file has one
// "name = value" per line (the flag's name without dashes); blank lines and
// lines starting with # are ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	configPath := fs.String("config", "", "file of `name = value` lines setting any of these flags; command-line flags win")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath == "" {
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	f, err := os.Open(*configPath)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return fmt.Errorf("%s:%d: want `name = value`, got %q", *configPath, n, line)
		}
		if fs.Lookup(name) == nil || name == "config" {
			return fmt.Errorf("%s:%d: unknown setting %q", *configPath, n, name)
		}
		if set[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", *configPath, n, name, err)
		}
	}
	return scanner.Err()
}

func newLogger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
}

// splitNodeIDs parses a comma-separated list of addresses.
func splitNodeIDs(list string) []wire.NodeID {
	var out []wire.NodeID
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, wire.NodeID(s))
		}
	}
	return out
}
