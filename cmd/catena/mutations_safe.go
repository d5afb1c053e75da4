//go:build !catena_unsafe

package main

import "github.com/catena-kv/catena/internal/chain"

// serverMutations returns the deliberate protocol bugs a server runs
// with: none. Only a binary built with -tags catena_unsafe has any
// (mutations_unsafe.go), for showing that catena-lab torture finds them.
func serverMutations() (chain.Mutations, error) { return chain.Mutations{}, nil }
