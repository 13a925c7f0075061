package fragment

import (
	"context"
	"strings"
	"testing"
)

func TestValidateURL(t *testing.T) {
	for _, u := range []string{
		"file:///",
		"file:///var/lib/quire/fragments/",
		"s3://bucket/",
		"s3://bucket",
		"s3://my.bucket-1/",
		"s3://bucket/prefix/",
		"s3://bucket/a/b.c/d_e-f/",
		"s3://bucket/?endpoint=127.0.0.1:8333",
		"s3://bucket/?endpoint=[::1]:8333&region=us-east-1&insecure=true",
		"s3://bucket/p/?endpoint=minio.internal&insecure=false",
		"s3://bucket/?region=eu-west-3",
		"gs://bucket/",
		"gs://my-bucket/prefix/",
		"gs://bucket/?endpoint=127.0.0.1:4443&insecure=true",
		"azure://account/container/",
		"azure://account/container",
		"azure://abc/a-b-c/",
		"azure://abcdefghijklmnopqrstuvwx/" + strings.Repeat("c", 63) + "/",
		"azure://acct0/cont1/a/b.c/d_e-f/",
		"azure://acct/cont/?endpoint=127.0.0.1:10000&insecure=true",
		"azure://acct/cont/p/?endpoint=blob.internal:443",
	} {
		if err := ValidateURL(u); err != nil {
			t.Errorf("ValidateURL(%q) = %v", u, err)
		}
	}
}

func TestValidateURLErrors(t *testing.T) {
	for _, tc := range []struct {
		url, want string // want is a substring of the error.
	}{
		{"", "store URL is empty"},
		{"file:///" + strings.Repeat("a", MaxURLLen), "maximum is 2048"},
		{"/var/lib/quire/", "has no scheme"},
		{"az://bucket/", `scheme "az" is not file, s3, gs or azure`},
		{"/var/lib/quire/", "want file://, s3://, gs:// or azure://"},
		{"azure://", "has no account (want azure://account/container/)"},
		{"azure:///cont/", "has no account"},
		{"azure://acct/", "has no container (want azure://account/container/)"},
		{"azure://acct", "has no container"},
		{"azure://ab/cont/", `account "ab" is 2 characters long; want 3 to 24`},
		{"azure://" + strings.Repeat("a", 25) + "/cont/", "is 25 characters long; want 3 to 24"},
		{"azure://Acct/cont/", `account "Acct" has invalid character 'A' (want lowercase letters and digits)`},
		{"azure://my-acct/cont/", `account "my-acct" has invalid character '-'`},
		{"azure://acct:10000/cont/", `account "acct:10000" has a port`},
		{"azure://acct/co/", `container "co" is 2 characters long; want 3 to 63`},
		{"azure://acct/" + strings.Repeat("c", 64) + "/", "is 64 characters long; want 3 to 63"},
		{"azure://acct/Cont/", `container "Cont" has invalid character 'C'`},
		{"azure://acct/my.cont/", `container "my.cont" has invalid character '.'`},
		{"azure://acct/my_cont/", `container "my_cont" has invalid character '_'`},
		{"azure://acct/-cont/", `container "-cont" must begin and end with a letter or digit`},
		{"azure://acct/cont-/", `container "cont-" must begin and end with a letter or digit`},
		{"azure://acct/co--nt/", `container "co--nt" has consecutive hyphens`},
		{"azure://acct/cont/prefix", `prefix "prefix" does not end in "/"`},
		{"azure://acct/cont//", `prefix "" has an empty, "." or ".." segment`},
		{"azure://acct/cont/a/../", `empty, "." or ".." segment`},
		{"azure://acct/cont/a:b/", `prefix "a:b" has invalid character ':'`},
		{"azure://acct/cont/?region=westeurope", `"region" is for s3 stores; an azure account has its location`},
		{"azure://acct/cont/?sas=x", `query parameter "sas" is unknown (want endpoint or insecure)`},
		{"azure://acct/cont/?insecure=true", "insecure=true needs an endpoint"},
		{"azure://acct/cont/?endpoint=http://127.0.0.1:10000", `endpoint "http://127.0.0.1:10000"`},
		{"azure://key@acct/cont/", "has user information"},
		{"gs://", "has no bucket (want gs://bucket/)"},
		{"gs://bucket/?region=us", `"region" is for s3 stores`},
		{"gs://bucket/?x=1", `query parameter "x" is unknown (want endpoint or insecure)`},
		{"gs://bucket/?insecure=true", "insecure=true needs an endpoint"},
		{"file:relative/", "is not of the form file://"},
		{"s3://user:pass@bucket/", "has user information"},
		{"s3://bucket/#x", "has a #fragment"},
		{"file:///a%20b/", "has %-escapes"},
		{":", "not a URL"},
		{"file://host/path/", `has host "host"`},
		{"file:///path", `path "/path" does not end in "/"`},
		{"file:///a/../b/", `path "/a/../b/" is not clean (want "/b/")`},
		{"file:///a//b/", "is not clean"},
		{"file:///a/?x=1", "file stores take no parameters"},
		{"file:///a/?", "file stores take no parameters"},
		{"file://", `path "" is not absolute`},
		{"s3://", "has no bucket"},
		{"s3:///prefix/", "has no bucket"},
		{"s3://b/", `bucket "b" is 1 characters long`},
		{"s3://Bucket/", `bucket "Bucket" has invalid character 'B'`},
		{"s3://bucket_1/", `has invalid character '_'`},
		{"s3://-bucket/", "must begin and end with a letter or digit"},
		{"s3://bucket:9000/", `bucket "bucket:9000" has a port`},
		{"s3://bucket/prefix", `prefix "/prefix" does not end in "/"`},
		{"s3://bucket/a//b/", "empty, \".\" or \"..\" segment"},
		{"s3://bucket/a/../", "empty, \".\" or \"..\" segment"},
		{"s3://bucket/a b/", `path "/a b/" has characters that need escaping`},
		{"file:///a b/", `path "/a b/" has characters that need escaping`},
		{"s3://bucket/a:b/", `prefix "a:b" has invalid character ':'`},
		{"s3://bucket/?endpoint=", `endpoint "": is empty`},
		{"s3://bucket/?endpoint=http://host:9000", `endpoint "http://host:9000"`},
		{"s3://bucket/?endpoint=host:0", `port "0" is not a number in 1-65535`},
		{"s3://bucket/?endpoint=host:99999", `port "99999"`},
		{"s3://bucket/?endpoint=:9000", `host "" is not a host name`},
		{"s3://bucket/?region=US", `region "US" is not lowercase`},
		{"s3://bucket/?insecure=maybe", `insecure "maybe" is not a boolean`},
		{"s3://bucket/?region=a&region=b", `query parameter "region" is given 2 times`},
		{"s3://bucket/?secret=x", `query parameter "secret" is unknown`},
		{"s3://bucket/?a;b", "query"},
	} {
		err := ValidateURL(tc.url)
		if err == nil {
			t.Errorf("ValidateURL(%q) succeeded, want error containing %q", tc.url, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateURL(%q) = %q, want error containing %q", tc.url, err, tc.want)
		}
		if _, oerr := Open(context.Background(), tc.url); oerr == nil || oerr.Error() != err.Error() {
			t.Errorf("Open(%q) = %v, want %v", tc.url, oerr, err)
		}
	}
}

// TestCanonicalURL checks that a store's URL is canonical and opens the
// same store.
func TestCanonicalURL(t *testing.T) {
	// An insecure Azure endpoint takes a shared key (any will do: opening
	// makes no request).
	t.Setenv("AZURE_STORAGE_KEY", "a2V5")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "")
	dir := t.TempDir()
	for _, tc := range []struct{ in, want string }{
		{"file://" + dir + "/", "file://" + dir + "/"},
		{"s3://bucket", "s3://bucket/"},
		{"s3://bucket/", "s3://bucket/"},
		{"s3://bucket/a/b/", "s3://bucket/a/b/"},
		{"s3://bucket/p/?region=us-east-1&insecure=true&endpoint=127.0.0.1:9", "s3://bucket/p/?endpoint=127.0.0.1:9&insecure=true&region=us-east-1"},
		{"s3://bucket/?insecure=false", "s3://bucket/"},
		{"s3://bucket/?insecure=1", "s3://bucket/?insecure=true"},
		{"s3://bucket/?endpoint=[::1]:9000", "s3://bucket/?endpoint=[::1]:9000"},
		{"azure://acct/cont", "azure://acct/cont/"},
		{"azure://acct/cont/a/b/", "azure://acct/cont/a/b/"},
		{"azure://acct/cont/p/?insecure=1&endpoint=127.0.0.1:10000", "azure://acct/cont/p/?endpoint=127.0.0.1:10000&insecure=true"},
		{"azure://acct/cont/?insecure=false", "azure://acct/cont/"},
	} {
		// Opening an S3 or Azure store makes no request, so these need no
		// server.
		s, err := Open(context.Background(), tc.in)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.in, err)
			continue
		}
		if got := s.URL(); got != tc.want {
			t.Errorf("Open(%q).URL() = %q, want %q", tc.in, got, tc.want)
		}
		if err := ValidateURL(s.URL()); err != nil {
			t.Errorf("ValidateURL(%q) = %v", s.URL(), err)
		}
	}
}
