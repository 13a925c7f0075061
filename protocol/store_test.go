package protocol

import (
	"strings"
	"testing"
)

func TestValidateStoreURL(t *testing.T) {
	for _, tc := range []struct{ url, err string }{
		{"file:///", ""},
		{"file:///var/quire/fragments/", ""},
		{"s3://bucket/", ""},
		{"s3://bucket", ""},
		{"s3://my.bucket-1/a/b-c/", ""},
		{"s3://bucket/prefix/?endpoint=127.0.0.1:9000&region=us-east-1&insecure=true", ""},
		{"s3://bucket/?endpoint=minio", ""},
		{"", "store URL is empty"},
		{"file:///" + strings.Repeat("a", MaxStoreURLLength) + "/", "bytes long; the maximum is 2048"},
		{"ftp://x", `"ftp://x": scheme "ftp" is not file, s3, gs or azure`},
		{"/var/quire/", "no scheme"},
		{"file:var/quire/", "not of the form file://"},
		{"file://host/var/", `has host "host"`},
		{"file:///var/quire", `path "/var/quire" does not end in "/"`},
		{"file:///var/../quire/", `path "/var/../quire/" is not clean (want "/quire/")`},
		{"file:///var//quire/", "is not clean"},
		{"file:///var/?x=1", "has a query"},
		{"file:///var/#frag", "has a #fragment"},
		{"file:///var%20x/", "has %-escapes"},
		{"s3://user:pw@bucket/", "has user information"},
		{"s3:///prefix/", "has no bucket"},
		{"s3://ab/", `bucket "ab" is 2 characters long`},
		{"s3://Bucket/", `bucket "Bucket" has invalid character 'B'`},
		{"s3://-bucket/", "must begin and end with a letter or digit"},
		{"s3://bucket:9000/", "has a port"},
		{"s3://bucket/prefix", `prefix "/prefix" does not end in "/"`},
		{"s3://bucket/a//b/", "empty"},
		{"s3://bucket/a/../", `".."`},
		{"s3://bucket/a b/", "need escaping"},
		{"file:///my dir/", "need escaping"},
		{"file:///a*b/", "need escaping"},
		{"file:///a:b/", ""},
		{"s3://bucket/a*b/", "need escaping"},
		{"s3://bucket/?acl=x", `query parameter "acl" is unknown`},
		{"s3://bucket/?region=a&region=b", `query parameter "region" is given 2 times`},
		{"s3://bucket/?region=US", `region "US" is not lowercase`},
		{"s3://bucket/?region=", `region "" is not`},
		{"s3://bucket/?insecure=maybe", `insecure "maybe" is not a boolean`},
		{"s3://bucket/?endpoint=", `endpoint "": is empty`},
		{"s3://bucket/?endpoint=http://x:9000", `endpoint "http://x:9000"`},
		{"s3://bucket/?endpoint=x:0", `port "0" is not a number`},
		{"s3://bucket/?endpoint=x:99999", `port "99999"`},
		{"s3://bucket/?endpoint=a;b", "query"},
	} {
		checkErr(t, "ValidateStoreURL("+tc.url+")", ValidateStoreURL(tc.url), tc.err)
	}
}
