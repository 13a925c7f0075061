package protocol

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// MaxStoreURLLength is the longest fragment store URL, in bytes.
const MaxStoreURLLength = 2048

// ValidateStoreURL returns an error if u is not the URL of a fragment
// store, checking only its syntax (it opens nothing). The error quotes u
// and says what is wrong. Store URLs are in canonical form, so that equal
// stores have equal URLs:
//
//	file:///abs/path/                      a directory: a clean absolute path ending in "/"
//	s3://bucket/                           an S3 bucket,
//	s3://bucket/prefix/?region=us-east-1   optionally beneath a prefix ending in "/"
//
// An s3 URL's query parameters are all optional, each given at most once:
// endpoint (the host[:port] of an S3-compatible service, without a
// scheme), region (lowercase letters, digits and '-') and insecure (a
// boolean: use http rather than https). Neither kind may carry user
// information or a #fragment.
func ValidateStoreURL(u string) error {
	if err := checkStoreURL(u); err != nil {
		return fmt.Errorf("%s: %s", quoteShort(u), err)
	}
	return nil
}

func checkStoreURL(raw string) error {
	switch {
	case raw == "":
		return errorString("empty")
	case len(raw) > MaxStoreURLLength:
		return fmt.Errorf("%d bytes, longer than %d", len(raw), MaxStoreURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", unwrapURLError(err))
	}
	switch {
	case u.Scheme == "":
		return errorString("no scheme (want file:// or s3://)")
	case u.Scheme != "file" && u.Scheme != "s3":
		return fmt.Errorf("unsupported scheme %q (want file or s3)", u.Scheme)
	case u.Opaque != "":
		return fmt.Errorf("not of the form %s://…", u.Scheme)
	case u.User != nil:
		return errorString("has user information; credentials do not belong in a store URL")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return errorString("has a #fragment")
	case strings.Contains(raw, "%"):
		return errorString("has %-escapes; store paths are plain")
	case u.EscapedPath() != u.Path:
		return fmt.Errorf("path %q has characters that a URL must escape", u.Path)
	}
	if u.Scheme == "file" {
		return checkFileURL(u)
	}
	return checkS3URL(u)
}

func checkFileURL(u *url.URL) error {
	switch {
	case u.Host != "":
		return fmt.Errorf("has host %q (want file:///absolute/path/)", u.Host)
	case u.RawQuery != "" || u.ForceQuery:
		return errorString("has a query; file stores take no parameters")
	case !strings.HasPrefix(u.Path, "/"):
		return fmt.Errorf("path %q is not absolute", u.Path)
	case !strings.HasSuffix(u.Path, "/"):
		return fmt.Errorf("path %q does not end in \"/\"", u.Path)
	}
	if clean := path.Clean(u.Path); clean != "/" && clean+"/" != u.Path {
		return fmt.Errorf("path %q is not clean (want %q)", u.Path, clean+"/")
	}
	for _, r := range u.Path {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("path %q has a control character", u.Path)
		}
	}
	return nil
}

func checkS3URL(u *url.URL) error {
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("bucket %q has a port (give endpoint=host:port instead)", u.Host)
	}
	if err := checkBucket(u.Host); err != nil {
		return err
	}
	if err := checkPrefix(u.Path); err != nil {
		return err
	}
	return checkS3Query(u.RawQuery)
}

// checkBucket checks an S3 bucket name: 3 to 63 lowercase letters, digits,
// '-' and '.', beginning and ending with a letter or digit.
func checkBucket(b string) error {
	if b == "" {
		return errorString("has no bucket (want s3://bucket/)")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q is %d characters long (want 3 to 63)", b, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return fmt.Errorf("bucket %q has %s (want lowercase letters, digits, '-' and '.')", b, describeByte(c))
		}
		if !alnum && (i == 0 || i == len(b)-1) {
			return fmt.Errorf("bucket %q does not begin and end with a letter or digit", b)
		}
	}
	return nil
}

// checkPrefix checks an s3 URL's path: "" or "/", or "/" followed by
// segments of journal-name characters, each ending in "/", none empty,
// "." or "..".
func checkPrefix(p string) error {
	if p == "" || p == "/" {
		return nil
	}
	if !strings.HasSuffix(p, "/") {
		return fmt.Errorf("prefix %q does not end in \"/\"", p)
	}
	inner := p[1 : len(p)-1]
	for i := 0; i < len(inner); i++ {
		if !isJournalNameByte(inner[i]) {
			return fmt.Errorf("prefix %q has %s (want letters, digits and -_./)", p, describeByte(inner[i]))
		}
	}
	for seg := range strings.SplitSeq(inner, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("prefix %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

func checkS3Query(raw string) error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return fmt.Errorf("query %q: %v", raw, err)
	}
	for key, vals := range q {
		if len(vals) != 1 {
			return fmt.Errorf("query parameter %q is given %d times", key, len(vals))
		}
		v := vals[0]
		switch key {
		case "endpoint":
			if err := checkEndpoint(v); err != nil {
				return fmt.Errorf("endpoint %q: %v", v, err)
			}
		case "region":
			if v == "" || strings.ContainsFunc(v, func(r rune) bool {
				return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-')
			}) {
				return fmt.Errorf("region %q is not lowercase letters, digits and '-'", v)
			}
		case "insecure":
			if _, err := strconv.ParseBool(v); err != nil {
				return fmt.Errorf("insecure %q is not a boolean", v)
			}
		default:
			return fmt.Errorf("query parameter %q is unknown (want endpoint, region or insecure)", key)
		}
	}
	return nil
}

// checkEndpoint checks host or host:port.
func checkEndpoint(e string) error {
	if e == "" {
		return errorString("is empty")
	}
	host := e
	if strings.Contains(e, ":") {
		h, port, err := net.SplitHostPort(e)
		if err != nil {
			return errorString("is not host or host:port")
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

func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

type errorString string

func (e errorString) Error() string { return string(e) }
