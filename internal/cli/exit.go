package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrFailureReported marks the failure of a command that has printed
// its own report (catena-lab torture's verdict): Exit prints nothing
// more and returns status 1.
var ErrFailureReported = errors.New("failure (reported)")

// Help is what a command returns when asked for its usage (-h): Exit
// prints the usage to standard output, where help asked for goes (catena
// get -h | less), and returns status 0. It matches flag.ErrHelp.
type Help struct{ Usage string }

func (h Help) Error() string { return "help requested" }

// Unwrap makes errors.Is(h, flag.ErrHelp) true.
func (h Help) Unwrap() error { return flag.ErrHelp }

// Exit returns the exit status of a command (named for its messages as
// "PROGRAM COMMAND") that returned err, printing a requested usage to
// stdout and err to stderr when no one has: 0 on success and after -h,
// 2 for a mistake in how the command was called, 1 for any other failure.
func Exit(stdout, stderr io.Writer, program, command string, err error) int {
	var help Help
	switch {
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.Usage)
		return 0
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrFlagsReported):
		return 2
	case errors.Is(err, ErrFailureReported):
		return 1
	}
	// Errors from the client package start with "catena: " already.
	fmt.Fprintf(stderr, "%s %s: %s\n", program, command, strings.TrimPrefix(err.Error(), "catena: "))
	if errors.As(err, new(UsageError)) {
		return 2
	}
	return 1
}
