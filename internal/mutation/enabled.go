//go:build catena_unsafe

package mutation

// Enabled: this build runs the mutations its options set.
const Enabled = true
