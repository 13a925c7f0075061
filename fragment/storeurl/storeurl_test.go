package storeurl

import "testing"

// Whatever parses has a canonical form that parses back to it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"file:///", "file:///var/quire/", "s3://bucket/", "s3://bucket",
		"s3://b-1/p/q/?endpoint=127.0.0.1:9000&region=us-east-1&insecure=true", "file:///a*b/",
		"s3://bucket/?insecure=false", "file://host/x/", "s3://Bucket/", "s3://bucket/?endpoint=x:0",
		"gs://bucket/p/?endpoint=127.0.0.1:4443&insecure=true",
		"azure://acct/cont/", "azure://acct/cont", "azure://account1/my-container/p/q/?endpoint=127.0.0.1:10000&insecure=true",
		"azure://Acct/cont/", "azure://acct/c--d/", "azure://acct/cont/?region=x", "azure://acct:1/cont/", "azure://acct//p/"} {
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

// An azure URL's account is its host, its container the first segment of
// its path, and its prefix the rest.
func TestParseAzure(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want URL
	}{
		{"azure://acct/cont/", URL{Scheme: "azure", Account: "acct", Bucket: "cont"}},
		{"azure://acct/cont", URL{Scheme: "azure", Account: "acct", Bucket: "cont"}},
		{"azure://acct/cont/a/b/", URL{Scheme: "azure", Account: "acct", Bucket: "cont", Prefix: "a/b/"}},
		{"azure://acct/cont/p/?endpoint=127.0.0.1:10000&insecure=true",
			URL{Scheme: "azure", Account: "acct", Bucket: "cont", Prefix: "p/", Endpoint: "127.0.0.1:10000", Insecure: true}},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
