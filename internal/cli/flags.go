// Package cli holds what Catena's binaries (cmd/catena, cmd/catena-lab)
// share on the command line, so both parse flags the same way: flag sets
// whose -h prints the command's usage and that read -config FILE, flags
// after positional arguments, usage errors and the exit statuses they
// map to, unknown commands and what they may be a typo of, and the
// lifetime of a process a supervisor (catena dev, catena-lab torture)
// starts.
package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/catena-kv/catena/internal/wire"
)

// NewFlagSet returns a flag set whose -h prints "usage: SYNOPSIS", the
// command's description, and its flags. Errors are returned, not fatal.
func NewFlagSet(name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\n", synopsis)
		if description != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", strings.TrimSpace(description))
		}
		fmt.Fprintln(fs.Output(), "flags:")
		fs.PrintDefaults()
	}
	return fs
}

// UsageError is a mistake in how a command was called: Exit prints it
// and returns status 2.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// UsageErrorf returns a UsageError with a formatted message.
func UsageErrorf(format string, args ...any) error {
	return UsageError{fmt.Sprintf(format, args...)}
}

// ErrFlagsReported marks a flag error that the flag package has already
// printed, with the command's usage: Exit prints nothing more and
// returns status 2.
var ErrFlagsReported = errors.New("flag error (reported)")

// ParseFlags parses args into fs and returns the positional arguments.
// Flags may come before, between and after them (catena get KEY -master
// ADDR); "--" ends the flags. Then it fills every flag not given on the
// command line from the file named by -config, if any. The file has one
// "name = value" per line (the flag's name without dashes); blank lines
// and lines starting with # are ignored.
//
// -h returns Help with the usage, for Exit to print to standard output;
// other flag errors return ErrFlagsReported after printing the error and
// the usage to the flag set's output (standard error).
func ParseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	configPath := fs.String("config", "", "read settings of any of these flags from `FILE`, one name = value per line; command-line flags win")
	output := fs.Output()
	var printed strings.Builder
	fs.SetOutput(&printed)
	defer fs.SetOutput(output)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, Help{Usage: printed.String()}
			}
			io.WriteString(output, printed.String())
			return nil, fmt.Errorf("%w: %w", ErrFlagsReported, err)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	if *configPath == "" {
		return positional, nil
	}
	return positional, applyConfigFile(fs, *configPath)
}

// applyConfigFile sets, from the file at path, every flag of fs that the
// command line did not set.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	f, err := os.Open(path)
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
			return fmt.Errorf("%s:%d: want `name = value`, got %q", path, n, line)
		}
		if fs.Lookup(name) == nil || name == "config" {
			return fmt.Errorf("%s:%d: unknown setting %q", path, n, name)
		}
		if set[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, n, name, err)
		}
	}
	return scanner.Err()
}

// StringFromEnv defines a string flag whose default is the value of the
// environment variable env (empty when it is unset). Its help names the
// variable once, with its value when set, `(default $CATENA_TLS_CA, now
// "ca.crt")`, where the flag package would add a second default of its
// own.
func StringFromEnv(fs *flag.FlagSet, name, env, usage string) *string {
	value := os.Getenv(env)
	note := "(default $" + env + ")"
	if value != "" {
		note = fmt.Sprintf("(default $%s, now %q)", env, value)
	}
	p := new(string)
	// Registered with an empty default, which the flag package does not
	// print, and then given the variable's value.
	fs.StringVar(p, name, "", usage+" "+note)
	*p = value
	return p
}

// Given reports the names of the flags of fs that the command line (or
// a -config file) set; defaults are not given.
func Given(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

// NoArguments returns a usage error when a command that takes only
// flags was given positional arguments.
func NoArguments(args []string) error {
	if len(args) > 0 {
		return UsageErrorf("unexpected arguments %q", args)
	}
	return nil
}

// IsHelp reports whether arg asks for a command's usage.
func IsHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// SplitNodeIDs parses a comma-separated list of addresses.
func SplitNodeIDs(list string) []wire.NodeID {
	var out []wire.NodeID
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, wire.NodeID(s))
		}
	}
	return out
}
