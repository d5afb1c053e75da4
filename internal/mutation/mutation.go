// Package mutation says whether this build may run deliberately broken
// protocol code. The simulator's mutation tests and catena torture's
// mutation runs break the protocol on purpose (chain.Mutations,
// master.Mutations, clientcore.Mutations, control.Mutations) to show that
// their checkers catch each kind of bug. A normal build has no such code:
// Enabled is a constant false there, so every check written as
//
//	if mutation.Enabled && m.SomeMutation { ... }
//
// compiles to nothing. Build with -tags catena_unsafe to enable them (the
// tests that need them skip otherwise: mutationtest.Require).
package mutation
