package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/release"
)

// runVersion prints the release, the protocol versions it speaks
// (internal/release) and the VCS revision the binary was built from, as
// recorded by the Go toolchain.
func runVersion(args []string, stdout io.Writer) error {
	if len(args) > 0 && cli.IsHelp(args[0]) {
		return cli.Help{Usage: "usage: catena version\n\nprints the release, the protocol versions it speaks (docs/upgrades.md), the VCS revision and the Go toolchain catena was built from\n"}
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("no build information in this binary")
	}
	fmt.Fprintln(stdout, versionLine(info))
	return nil
}

// versionLine describes a build: "catena RELEASE (protocol RANGE),
// revision REV (TIME), GOVERSION", with "with uncommitted changes" after
// the revision when the working tree was modified. A binary built
// without VCS information (go run, go test, or outside a repository)
// says "revision unknown".
func versionLine(info *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "catena %s (protocol %s), ", release.Version, release.Speaks)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " (%s)", t)
		}
		if settings["vcs.modified"] == "true" {
			b.WriteString(" with uncommitted changes")
		}
	} else {
		b.WriteString("revision unknown")
	}
	fmt.Fprintf(&b, ", %s", info.GoVersion)
	if goos, goarch := settings["GOOS"], settings["GOARCH"]; goos != "" && goarch != "" {
		fmt.Fprintf(&b, " %s/%s", goos, goarch)
	}
	return b.String()
}
