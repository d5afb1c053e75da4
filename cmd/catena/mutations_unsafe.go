//go:build catena_unsafe

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/catena-kv/catena/internal/chain"
)

// unsafeEnv names the environment variable that, in a binary built with
// -tags catena_unsafe, lists the deliberate protocol bugs every server
// runs with: a mutation run shows that catena-lab torture finds them
// (docs/torture.md). Default builds have no such code.
const unsafeEnv = "CATENA_UNSAFE"

// serverMutations returns the mutations CATENA_UNSAFE lists.
func serverMutations() (chain.Mutations, error) {
	var m chain.Mutations
	for _, name := range strings.Split(os.Getenv(unsafeEnv), ",") {
		switch strings.TrimSpace(name) {
		case "":
		case "ignore-lease":
			m.IgnoreLease = true // serve clients without a valid lease
		case "head-replies-early":
			m.HeadRepliesEarly = true // answer updates before the tail has them
		case "geo-overwrite":
			m.GeoOverwrite = true // apply other sites' updates whatever their stamps
		case "geo-skip-dependencies":
			m.GeoSkipDependencies = true // apply other sites' updates before their dependencies
		case "split-keeps-serving":
			m.SplitKeepsServing = true // answer for keys a split moved to the sibling volume
		case "watch-resumes-late":
			m.WatchResumesLate = true // answer a watch from one revision after the one asked for
		case "watch-delivers-uncommitted":
			m.WatchDeliversUncommitted = true // answer a watch with updates not known committed
		default:
			return m, fmt.Errorf("%s: unknown mutation %q (ignore-lease, head-replies-early, geo-overwrite, geo-skip-dependencies, split-keeps-serving, watch-resumes-late, watch-delivers-uncommitted)", unsafeEnv, name)
		}
	}
	return m, nil
}
