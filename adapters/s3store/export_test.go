package s3store

// The names the external tests use of what the package keeps to itself.
const (
	EnvBucket            = envBucket
	EnvPrefix            = envPrefix
	EnvEndpoints         = envEndpoints
	DefaultClusterSettle = defaultClusterSettle
)

// NewDriverWithClient is NewWithClient's driver.
var NewDriverWithClient = newDriverWithClient
