// Package storeurl parses fragment store URLs: file:///abs/path/,
// s3://bucket/prefix/?endpoint=host:port&region=REGION&insecure=true,
// gs://bucket/prefix/?endpoint=host:port&insecure=true and
// azure://account/container/prefix/?endpoint=host:port&insecure=true. It
// is the one definition of a valid store URL, shared by the fragment
// stores that open them and the journal specs that name them, and it
// depends on nothing but the standard library.
package storeurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// URL is a parsed store URL.
type URL struct {
	Scheme string // "file", "s3", "gs" or "azure"
	// file
	Root string // absolute, clean directory
	// s3, gs and azure (whose Bucket is the container)
	Account          string // azure only: the storage account
	Bucket, Prefix   string // prefix is "" or ends with "/"
	Endpoint, Region string // gs, azure: no region
	Insecure         bool
}

// String returns the canonical form of u, which parses back to u. Its
// parts were validated to need no escaping.
func (u URL) String() string {
	if u.Scheme == "file" {
		return "file://" + strings.TrimSuffix(filepath.ToSlash(u.Root), "/") + "/"
	}
	var q []string // In the sorted order of url.Values.Encode.
	if u.Endpoint != "" {
		q = append(q, "endpoint="+u.Endpoint)
	}
	if u.Insecure {
		q = append(q, "insecure=true")
	}
	if u.Region != "" {
		q = append(q, "region="+u.Region)
	}
	s := u.Scheme + "://" + u.Bucket + "/" + u.Prefix
	if u.Scheme == "azure" {
		s = "azure://" + u.Account + "/" + u.Bucket + "/" + u.Prefix
	}
	if len(q) > 0 {
		s += "?" + strings.Join(q, "&")
	}
	return s
}

// MaxLen is the maximum length of a store URL, in bytes.
const MaxLen = 2048

// Parse parses and checks a store URL, naming what is wrong with it.
func Parse(rawURL string) (URL, error) {
	bad := func(format string, args ...any) (URL, error) {
		return URL{}, fmt.Errorf("store URL %q: %s", rawURL, fmt.Sprintf(format, args...))
	}
	switch {
	case rawURL == "":
		return URL{}, errors.New("store URL is empty")
	case len(rawURL) > MaxLen:
		return URL{}, fmt.Errorf("store URL %.32q… is %d bytes long; the maximum is %d", rawURL, len(rawURL), MaxLen)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad("not a URL: %v", err)
	}
	switch {
	case u.Scheme == "":
		return bad("has no scheme (want file://, s3://, gs:// or azure://)")
	case u.Scheme != "file" && u.Scheme != "s3" && u.Scheme != "gs" && u.Scheme != "azure":
		return bad("scheme %q is not file, s3, gs or azure", u.Scheme)
	case u.Opaque != "":
		return bad("is not of the form %s://…", u.Scheme)
	case u.User != nil:
		return bad("has user information; credentials do not belong in a store URL")
	case u.Fragment != "" || strings.Contains(rawURL, "#"):
		return bad("has a #fragment")
	case strings.Contains(rawURL, "%"):
		return bad("has %%-escapes; store paths are plain")
	case u.RawPath != "":
		return bad("path %q has characters that need escaping", u.Path)
	}
	switch u.Scheme {
	case "file":
		return parseFileURL(u, bad)
	case "azure":
		return parseAzureURL(u, bad)
	}
	return parseBucketURL(u, bad)
}

// parseFileURL parses file:///abs/path/: a clean absolute path ending in
// "/", with no host or query.
func parseFileURL(u *url.URL, bad func(string, ...any) (URL, error)) (URL, error) {
	switch {
	case u.Host != "":
		return bad("has host %q (want file:///absolute/path/)", u.Host)
	case u.RawQuery != "" || u.ForceQuery:
		return bad("has a query; file stores take no parameters")
	case !strings.HasPrefix(u.Path, "/"):
		return bad("path %q is not absolute", u.Path)
	case !strings.HasSuffix(u.Path, "/"):
		return bad("path %q does not end in \"/\"", u.Path)
	}
	if clean := path.Clean(u.Path); clean != "/" && clean+"/" != u.Path {
		return bad("path %q is not clean (want %q)", u.Path, clean+"/")
	}
	if strings.ContainsFunc(u.Path, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return bad("path %q has a control character", u.Path)
	}
	return URL{Scheme: "file", Root: filepath.Clean(filepath.FromSlash(u.Path))}, nil
}

// parseBucketURL parses s3://bucket/prefix/?query and
// gs://bucket/prefix/?query.
func parseBucketURL(u *url.URL, bad func(string, ...any) (URL, error)) (URL, error) {
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return bad("bucket %q has a port (give endpoint=host:port instead)", u.Host)
	}
	su := URL{Scheme: u.Scheme, Bucket: u.Host}
	if err := validateBucket(su.Scheme, su.Bucket); err != nil {
		return bad("%v", err)
	}
	if p := u.Path; p != "" && p != "/" {
		if !strings.HasSuffix(p, "/") {
			return bad("prefix %q does not end in \"/\"", p)
		}
		su.Prefix = p[1:]
		if err := validatePrefix(strings.TrimSuffix(su.Prefix, "/")); err != nil {
			return bad("%v", err)
		}
	}
	return parseQuery(u, su, bad)
}

// parseAzureURL parses azure://account/container/prefix/?query: the
// account is the host, the container the first segment of the path.
func parseAzureURL(u *url.URL, bad func(string, ...any) (URL, error)) (URL, error) {
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return bad("account %q has a port (give endpoint=host:port instead)", u.Host)
	}
	su := URL{Scheme: "azure", Account: u.Host}
	if err := validateAccount(su.Account); err != nil {
		return bad("%v", err)
	}
	container, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if err := validateContainer(container); err != nil {
		return bad("%v", err)
	}
	su.Bucket = container
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			return bad("prefix %q does not end in \"/\"", prefix)
		}
		if err := validatePrefix(strings.TrimSuffix(prefix, "/")); err != nil {
			return bad("%v", err)
		}
		su.Prefix = prefix
	}
	return parseQuery(u, su, bad)
}

// parseQuery parses the query of an s3, gs or azure URL into su.
func parseQuery(u *url.URL, su URL, bad func(string, ...any) (URL, error)) (URL, error) {
	// Only s3 has regions: a gs bucket and an azure account have a
	// location of their own.
	hasRegion := su.Scheme == "s3"
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query %q: %v", u.RawQuery, err)
	}
	for key, vals := range q {
		if len(vals) != 1 {
			return bad("query parameter %q is given %d times", key, len(vals))
		}
		val := vals[0]
		switch key {
		case "endpoint":
			if err := validateEndpoint(val); err != nil {
				return bad("endpoint %q: %v", val, err)
			}
			su.Endpoint = val
		case "region":
			if !hasRegion {
				owner := "a gs bucket"
				if su.Scheme == "azure" {
					owner = "an azure account"
				}
				return bad("query parameter \"region\" is for s3 stores; %s has its location", owner)
			}
			if val == "" || strings.ContainsFunc(val, func(r rune) bool {
				return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-')
			}) {
				return bad("region %q is not lowercase letters, digits and \"-\"", val)
			}
			su.Region = val
		case "insecure":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return bad("insecure %q is not a boolean", val)
			}
			su.Insecure = b
		default:
			if !hasRegion {
				return bad("query parameter %q is unknown (want endpoint or insecure)", key)
			}
			return bad("query parameter %q is unknown (want endpoint, region or insecure)", key)
		}
	}
	if !hasRegion && su.Insecure && su.Endpoint == "" {
		// Cloud Storage and Azure speak only https: plain http is for an
		// emulator, which must be named.
		return bad("insecure=true needs an endpoint (an emulator's host:port)")
	}
	return su, nil
}

// validateBucket checks a bucket's name: the rules S3 and Cloud Storage
// share (Cloud Storage also allows "_", and dotted names up to 222
// characters, which are not accepted here).
func validateBucket(scheme, b string) error {
	if b == "" {
		return fmt.Errorf("has no bucket (want %s://bucket/)", scheme)
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q is %d characters long; want 3 to 63", b, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return fmt.Errorf("bucket %q has invalid character %q (want lowercase letters, digits, \"-\" and \".\")", b, c)
		}
		if !alnum && (i == 0 || i == len(b)-1) {
			return fmt.Errorf("bucket %q must begin and end with a letter or digit", b)
		}
	}
	return nil
}

// validateAccount checks an Azure storage account's name: 3 to 24
// lowercase letters and digits.
func validateAccount(a string) error {
	if a == "" {
		return errors.New("has no account (want azure://account/container/)")
	}
	if len(a) < 3 || len(a) > 24 {
		return fmt.Errorf("account %q is %d characters long; want 3 to 24", a, len(a))
	}
	for i := 0; i < len(a); i++ {
		if c := a[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return fmt.Errorf("account %q has invalid character %q (want lowercase letters and digits)", a, c)
		}
	}
	return nil
}

// validateContainer checks an Azure container's name: 3 to 63 lowercase
// letters, digits and single hyphens, beginning and ending with a letter
// or digit.
func validateContainer(c string) error {
	if c == "" {
		return errors.New("has no container (want azure://account/container/)")
	}
	if len(c) < 3 || len(c) > 63 {
		return fmt.Errorf("container %q is %d characters long; want 3 to 63", c, len(c))
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		alnum := 'a' <= b && b <= 'z' || '0' <= b && b <= '9'
		if !alnum && b != '-' {
			return fmt.Errorf("container %q has invalid character %q (want lowercase letters, digits and \"-\")", c, b)
		}
	}
	switch {
	case c[0] == '-' || c[len(c)-1] == '-':
		return fmt.Errorf("container %q must begin and end with a letter or digit", c)
	case strings.Contains(c, "--"):
		return fmt.Errorf("container %q has consecutive hyphens", c)
	}
	return nil
}

func validatePrefix(p string) error {
	for i := 0; i < len(p); i++ {
		if !pathByte(p[i]) {
			return fmt.Errorf("prefix %q has invalid character %q (want letters, digits and -_./)", p, p[i])
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("prefix %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

func validateEndpoint(e string) error {
	if e == "" {
		return errors.New("is empty")
	}
	host := e
	if strings.Contains(e, ":") {
		h, port, err := net.SplitHostPort(e)
		if err != nil {
			return errors.New("is not host or host:port")
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("port %q is not a number in 1-65535", port)
		}
		host = h
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("/?#@%", r)
	}) {
		return fmt.Errorf("host %q is not a host name or address (want host or host:port, without a scheme)", host)
	}
	return nil
}

// pathByte reports whether c may appear in an S3 prefix: the characters of
// journal names.
func pathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '/'
}
