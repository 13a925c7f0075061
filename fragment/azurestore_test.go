package fragment

// The Azure store's tests need no server: no Azure Blob service or
// emulator could be run where the store was written, so what they cover
// is what the store decides by itself (URLs, blob names, credentials, SAS
// signatures, the meaning of the service's errors). Its requests are
// tested against nothing.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
)

// testAzureKey is an account key for tests (any base64 will do).
var testAzureKey = base64.StdEncoding.EncodeToString([]byte("quire test account key, 32 bytes"))

// setAzureEnv sets the Azure store's credential variables ("" unsets).
func setAzureEnv(t *testing.T, key, sasToken string) {
	t.Setenv(azureKeyEnv, key)
	t.Setenv(azureSASEnv, sasToken)
}

// openAzure opens the Azure store at rawURL through Open.
func openAzure(t *testing.T, rawURL string) *azureStore {
	t.Helper()
	s, err := Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	as, ok := s.(*azureStore)
	if !ok {
		t.Fatalf("Open(%q) is a %T, not an Azure store", rawURL, s)
	}
	return as
}

func azureTestFragment() Fragment {
	return fragmentOf("orders/eu", 1024, testContent(100, 1), Zstd)
}

// TestAzureStoreURLs checks where a store's blobs are: the service's URL
// (Azure's own, or an endpoint's, path-style), the container, and the
// blob's name beneath the prefix; the SDK's clients address the same.
func TestAzureStoreURLs(t *testing.T) {
	setAzureEnv(t, testAzureKey, "")
	f := azureTestFragment()
	for _, tc := range []struct {
		url, container, key string
	}{
		{"azure://acct/cont/", "https://acct.blob.core.windows.net/cont", f.Name()},
		{"azure://acct/cont", "https://acct.blob.core.windows.net/cont", f.Name()},
		{"azure://acct/cont/p/q/", "https://acct.blob.core.windows.net/cont", "p/q/" + f.Name()},
		{"azure://acct/cont/p/?endpoint=127.0.0.1:10000&insecure=true", "http://127.0.0.1:10000/acct/cont", "p/" + f.Name()},
		{"azure://acct/cont/?endpoint=blob.internal:8443", "https://blob.internal:8443/acct/cont", f.Name()},
	} {
		s := openAzure(t, tc.url)
		if got := s.key(f); got != tc.key {
			t.Errorf("%s: key = %q, want %q", tc.url, got, tc.key)
		}
		if got := s.container.URL(); got != tc.container {
			t.Errorf("%s: the SDK's container URL is %q, want %q", tc.url, got, tc.container)
		}
		want := tc.container + "/" + tc.key
		if got := s.blobURL(s.key(f)); got != want {
			t.Errorf("%s: blob URL = %q, want %q", tc.url, got, want)
		}
		// The SDK escapes the name's "/", which the service reads as "/".
		if got, err := url.PathUnescape(s.blob(s.key(f)).URL()); err != nil || got != want {
			t.Errorf("%s: the SDK's blob URL is %q (unescaped: %v), want %q", tc.url, s.blob(s.key(f)).URL(), err, want)
		}
	}
}

func TestAzureCredentials(t *testing.T) {
	const insecure = "azure://acct/cont/?endpoint=127.0.0.1:10000&insecure=true"
	future := time.Now().Add(48 * time.Hour).UTC().Format(sas.TimeFormat)
	token := "sv=2024-11-04&sr=c&sp=rl&se=" + future + "&sig=c2ln%2Bc2ln"
	for _, tc := range []struct {
		name, key, sas, url string
		want                string // The credentials' kind, or a substring of the error.
	}{
		{"key", testAzureKey, "", "azure://acct/cont/", "shared key"},
		{"key before SAS", testAzureKey, token, "azure://acct/cont/", "shared key"},
		{"SAS", "", token, "azure://acct/cont/", "SAS token"},
		{"SAS with ?", "", "?" + token, "azure://acct/cont/", "SAS token"},
		{"none", "", "", "azure://acct/cont/", "DefaultAzureCredential"},
		{"none, https endpoint", "", "", "azure://acct/cont/?endpoint=blob.internal", "DefaultAzureCredential"},
		{"key, insecure", testAzureKey, "", insecure, "shared key"},
		{"SAS, insecure", "", token, insecure, "SAS token"},
		{"none, insecure", "", "", insecure, "insecure=true needs AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN"},
		{"bad key", "not base64!", "", "azure://acct/cont/", "AZURE_STORAGE_KEY is not a base64 account key"},
		{"SAS without sig", "", "sv=2024-11-04&sp=r", "azure://acct/cont/", "AZURE_STORAGE_SAS_TOKEN is not a SAS token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setAzureEnv(t, tc.key, tc.sas)
			s, err := Open(context.Background(), tc.url)
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.url) {
					t.Fatalf("Open: %v, want %s (and the URL)", err, tc.want)
				}
				if tc.key != "" && strings.Contains(err.Error(), tc.key) {
					t.Errorf("the error %q tells the key", err)
				}
				return
			}
			if got := s.(*azureStore).auth.String(); got != tc.want {
				t.Errorf("credentials: %s, want %s", got, tc.want)
			}
		})
	}
}

// TestAzureOpenMakesNoRequest opens stores at an endpoint that listens but
// never answers, and signs a URL with a key: no connection may reach it.
func TestAzureOpenMakesNoRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	setAzureEnv(t, testAzureKey, "")
	s := openAzure(t, "azure://acct/cont/?endpoint="+ln.Addr().String()+"&insecure=true")
	if _, err := s.SignURL(ctx, azureTestFragment(), time.Hour); err != nil {
		t.Fatalf("SignURL: %v", err)
	}
	setAzureEnv(t, "", "")
	s = openAzure(t, "azure://acct/cont/?endpoint="+ln.Addr().String())
	if _, err := s.SignURL(ctx, azureTestFragment(), time.Hour); err == nil {
		t.Error("SignURL with Entra ID's credentials at an endpoint succeeded")
	}
	// A connection made would wait in the listener's backlog.
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("opening the stores connected to the endpoint")
	}
}

// parseSAS returns the path of a signed URL and its SAS.
func parseSAS(t *testing.T, rawURL string) (*url.URL, sas.QueryParameters) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("SignURL gave %q: %v", rawURL, err)
	}
	return u, sas.NewQueryParameters(u.Query(), false)
}

// TestAzureSignURLSharedKey checks a URL signed with the shared key: the
// blob's, with a SAS that lets its holder read that blob until now + ttl,
// whose signature is the SDK's for those values and that key.
func TestAzureSignURLSharedKey(t *testing.T) {
	setAzureEnv(t, testAzureKey, "")
	f := azureTestFragment()
	for _, tc := range []struct{ url, blobURL, protocol string }{
		{"azure://acct/cont/p/", "https://acct.blob.core.windows.net/cont/p/" + f.Name(), "https"},
		{"azure://acct/cont/?endpoint=127.0.0.1:10000&insecure=true", "http://127.0.0.1:10000/acct/cont/" + f.Name(), "https,http"},
	} {
		s := openAzure(t, tc.url)
		const ttl = time.Hour
		before := time.Now()
		raw, err := s.SignURL(context.Background(), f, ttl)
		if err != nil {
			t.Fatalf("%s: SignURL: %v", tc.url, err)
		}
		u, p := parseSAS(t, raw)
		if base := strings.TrimSuffix(raw, "?"+u.RawQuery); base != tc.blobURL {
			t.Errorf("%s: signed URL %q is not of %q", tc.url, raw, tc.blobURL)
		}
		if p.Permissions() != "r" || p.Resource() != "b" || string(p.Protocol()) != tc.protocol || !p.StartTime().IsZero() {
			t.Errorf("%s: SAS has sp=%q sr=%q spr=%q st=%v, want sp=r sr=b spr=%s and no start",
				tc.url, p.Permissions(), p.Resource(), p.Protocol(), p.StartTime(), tc.protocol)
		}
		if se := p.ExpiryTime(); se.Before(before.Add(ttl).Add(-time.Second)) || se.After(time.Now().Add(ttl)) {
			t.Errorf("%s: SAS expires at %v, want about %v", tc.url, se, before.Add(ttl))
		}
		if got, want := p.Signature(), signAzure(t, testAzureKey, p, s.key(f)); got != want {
			t.Errorf("%s: signature %q, want the SDK's %q", tc.url, got, want)
		}
		otherKey := base64.StdEncoding.EncodeToString([]byte("another key"))
		if p.Signature() == signAzure(t, otherKey, p, s.key(f)) {
			t.Errorf("%s: the signature verifies with another key too", tc.url)
		}
	}
}

// signAzure is the SDK's signature, with key, of a blob SAS with p's
// values for blob name of container "cont" of account "acct".
func signAzure(t *testing.T, key string, p sas.QueryParameters, name string) string {
	t.Helper()
	cred, err := service.NewSharedKeyCredential("acct", key)
	if err != nil {
		t.Fatal(err)
	}
	q, err := sas.BlobSignatureValues{
		Version: p.Version(), Protocol: p.Protocol(), StartTime: p.StartTime(), ExpiryTime: p.ExpiryTime(),
		Permissions: p.Permissions(), ContainerName: "cont", BlobName: name,
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	return q.Signature()
}

// TestAzureSignURLSASToken checks that a store whose credentials are a SAS
// token gives the blob's URL with the token, if it lets its holder read for
// ttl.
func TestAzureSignURLSASToken(t *testing.T) {
	f := azureTestFragment()
	in := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(sas.TimeFormat) }
	for _, tc := range []struct {
		token, want string // want: a substring of the error, or "" for the URL.
	}{
		{"sv=2024-11-04&sr=c&sp=rl&se=" + in(48*time.Hour) + "&sig=c2ln%2Bc2ln", ""},
		{"sv=2024-11-04&ss=b&srt=sco&sp=rwdl&se=" + in(48*time.Hour) + "&sig=c2ln", ""},
		{"sv=2024-11-04&sr=c&sp=r&sig=c2ln", ""}, // No expiry in the token.
		{"sv=2024-11-04&sr=c&sp=wl&se=" + in(48*time.Hour) + "&sig=c2ln", `does not permit reading (sp="wl")`},
		{"sv=2024-11-04&sr=c&sp=r&se=" + in(30*time.Minute) + "&sig=c2ln", "before the URL would"},
	} {
		setAzureEnv(t, "", tc.token)
		s := openAzure(t, "azure://acct/cont/p/")
		got, err := s.SignURL(context.Background(), f, time.Hour)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: SignURL: %v", tc.token, err)
		case tc.want == "" && got != "https://acct.blob.core.windows.net/cont/p/"+f.Name()+"?"+tc.token:
			t.Errorf("%s: SignURL = %q, want the blob's URL with the token", tc.token, got)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: SignURL = %q, %v; want an error containing %q", tc.token, got, err, tc.want)
		}
	}
}

func TestAzureSignURLErrors(t *testing.T) {
	setAzureEnv(t, testAzureKey, "")
	s := openAzure(t, "azure://acct/cont/")
	f := azureTestFragment()
	for _, ttl := range []time.Duration{0, time.Millisecond, 8 * 24 * time.Hour} {
		if _, err := s.SignURL(context.Background(), f, ttl); err == nil || !strings.Contains(err.Error(), "is not between") {
			t.Errorf("SignURL with ttl %v: %v, want an error", ttl, err)
		}
	}
	if _, err := s.SignURL(context.Background(), Fragment{Journal: "j"}, time.Hour); err == nil {
		t.Error("SignURL of an invalid fragment succeeded")
	}
}

// TestAzureErrors checks what the store makes of the service's errors, as
// the SDK reports them.
func TestAzureErrors(t *testing.T) {
	respErr := func(status int, code string) error {
		return fmt.Errorf("op: %w", &azcore.ResponseError{StatusCode: status, ErrorCode: code})
	}
	for _, tc := range []struct {
		err              error
		notExist, exists bool
	}{
		{respErr(http.StatusNotFound, "BlobNotFound"), true, false},
		{respErr(http.StatusNotFound, ""), true, false}, // A HEAD's: no body.
		{respErr(http.StatusNotFound, "ContainerNotFound"), true, false},
		{respErr(http.StatusConflict, "BlobAlreadyExists"), false, true},
		{respErr(http.StatusConflict, ""), false, true},
		{respErr(http.StatusPreconditionFailed, "ConditionNotMet"), false, true},
		{respErr(http.StatusPreconditionFailed, ""), false, true},
		{respErr(http.StatusConflict, "LeaseIdMissing"), false, false},
		{respErr(http.StatusConflict, "ContainerBeingDeleted"), false, false},
		{respErr(http.StatusForbidden, "AuthenticationFailed"), false, false},
		{respErr(http.StatusInternalServerError, "InternalError"), false, false},
		{errors.New("connection refused"), false, false},
	} {
		got := azureNotExist(tc.err)
		if errors.Is(got, fs.ErrNotExist) != tc.notExist {
			t.Errorf("azureNotExist(%v) = %v: wraps fs.ErrNotExist %v, want %v", tc.err, got, !tc.notExist, tc.notExist)
		}
		var rerr *azcore.ResponseError
		if errors.As(tc.err, &rerr) && !errors.As(got, &rerr) {
			t.Errorf("azureNotExist(%v) = %v, which no longer wraps the SDK's error", tc.err, got)
		}
		if azureExists(tc.err) != tc.exists {
			t.Errorf("azureExists(%v) = %v, want %v", tc.err, !tc.exists, tc.exists)
		}
	}
}
