package broker

import "testing"

// A store's metric label keeps its scheme, bucket and prefix, and drops
// the query: endpoints and options would make long labels.
func TestStoreLabelDropsTheQuery(t *testing.T) {
	for url, want := range map[string]string{
		"s3://bucket/prefix/?endpoint=10.0.0.1:9000&region=x": "s3://bucket/prefix/",
		"file:///var/lib/quire/store/":                        "file:///var/lib/quire/store/",
	} {
		if got := storeLabel(url); got != want {
			t.Errorf("storeLabel(%q) = %q, want %q", url, got, want)
		}
	}
}
