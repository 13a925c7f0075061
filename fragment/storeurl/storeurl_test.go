package storeurl

import "testing"

// Whatever parses has a canonical form that parses back to it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"file:///", "file:///var/quire/", "s3://bucket/", "s3://bucket",
		"s3://b-1/p/q/?endpoint=127.0.0.1:9000&region=us-east-1&insecure=true", "file:///a*b/",
		"s3://bucket/?insecure=false", "file://host/x/", "s3://Bucket/", "s3://bucket/?endpoint=x:0",
		"gs://bucket/p/?endpoint=127.0.0.1:4443&insecure=true"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(u.String())
		if err != nil || again != u {
			t.Fatalf("%q parses to %+v, whose form %q parses to %+v, %v", s, u, u.String(), again, err)
		}
	})
}
