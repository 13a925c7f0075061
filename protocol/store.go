package protocol

import "github.com/quire-dev/quire/fragment/storeurl"

// MaxStoreURLLength is the longest fragment store URL, in bytes.
const MaxStoreURLLength = storeurl.MaxLen

// ValidateStoreURL returns an error if u is not the URL of a fragment
// store, checking only its syntax (it opens nothing). The error quotes u
// and says what is wrong. The rules are the fragment stores' own
// (package fragment/storeurl), so a spec never names a store that brokers
// cannot open:
//
//	file:///abs/path/                      a directory: a clean absolute path ending in "/"
//	s3://bucket/                           an S3 bucket,
//	s3://bucket/prefix/?region=us-east-1   optionally beneath a prefix ending in "/"
//	gs://bucket/prefix/                    a Google Cloud Storage bucket
//	azure://account/container/prefix/      an Azure Blob Storage container
//
// An s3 URL's query parameters are all optional, each given at most once:
// endpoint (the host[:port] of an S3-compatible service, without a
// scheme), region (lowercase letters, digits and '-') and insecure (a
// boolean: use http rather than https). Neither kind may carry user
// information or a #fragment.
func ValidateStoreURL(u string) error {
	_, err := storeurl.Parse(u)
	return err
}
