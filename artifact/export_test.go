package artifact

// What the tests reach of the package's unexported names.

// ValidationError is the error naming the field that broke its schema.
type ValidationError = validationError

// Types lists the built-in content types.
var Types = builtinTypes

// DefaultCleanupAge is Config.CleanupAge's default.
const DefaultCleanupAge = defaultCleanupAge
