//go:build !catena_unsafe

package mutation

// Enabled: this build has no mutation code; options that set one change
// nothing.
const Enabled = false
