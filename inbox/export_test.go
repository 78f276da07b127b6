package inbox

// What the tests reach of the package's unexported names.

// DecodeSubmission decodes and validates a submission.
var DecodeSubmission = decodeSubmission

// MaxTTLHours bounds metadata.ttl_hours.
const MaxTTLHours = maxTTLHours

// ValidationError is the error naming the field of a submission that is wrong.
type ValidationError = validationError
