package fragment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"

	"github.com/quire-dev/quire/fragment/storeurl"
)

// The environment variables of an Azure store's credentials, in the order
// they are taken.
const (
	azureKeyEnv = "AZURE_STORAGE_KEY"
	azureSASEnv = "AZURE_STORAGE_SAS_TOKEN"
)

// azureRetries bounds the SDK's retries of one request (after 1 s, then 3
// s twice, give or take its jitter: about 7 s before it gives up, as a GCS
// store's tries).
const azureRetries = 3

// azureDelegationLife is the least life asked of a user delegation key,
// so that one key signs the URLs of many reads.
const azureDelegationLife = 24 * time.Hour

// azureClockSkew is how far before now a user delegation key starts, for
// a service whose clock is behind ours.
const azureClockSkew = 5 * time.Minute

// azureUntested is the once of the log line that says the store was never
// run against a server.
var azureUntested sync.Once

// azureStore is a Store in a container of Azure Blob Storage. Fragment f
// is the block blob PREFIX + f.Name().
//
// No Azure Blob service, nor any emulator of one, could be run where this
// store was written: its requests have been tested against none.
type azureStore struct {
	svc       *service.Client
	container *container.Client
	// containerURL is the container's URL, without credentials: blobs'
	// URLs are it, "/" and their names.
	containerURL string
	name         string // the container's
	prefix       string // "" or ends with "/".
	url          string
	endpoint     string // "" for Azure's own.
	insecure     bool
	auth         azureAuth

	mu            sync.Mutex // Guards the two below.
	delegation    *service.UserDelegationCredential
	delegationEnd time.Time
}

// azureAuth is an Azure store's credentials: one of its fields is set.
type azureAuth struct {
	key       *service.SharedKeyCredential
	sas       string // A SAS token: a query, without "?".
	sasParams sas.QueryParameters
	token     azcore.TokenCredential // DefaultAzureCredential.
}

func (a azureAuth) String() string {
	switch {
	case a.key != nil:
		return "shared key"
	case a.sas != "":
		return "SAS token"
	}
	return "DefaultAzureCredential"
}

// azureCredentials returns the credentials of the store at u, taken from
// the environment: the account's shared key, else a SAS token, else
// Microsoft Entra ID's DefaultAzureCredential (environment, workload
// identity, managed identity, Azure CLI...), which is asked for no token
// until a request needs one. Errors name a variable, never its value.
func azureCredentials(u storeurl.URL) (azureAuth, error) {
	if key := os.Getenv(azureKeyEnv); key != "" {
		cred, err := service.NewSharedKeyCredential(u.Account, key)
		if err != nil {
			return azureAuth{}, fmt.Errorf("%s is not a base64 account key", azureKeyEnv)
		}
		return azureAuth{key: cred}, nil
	}
	if tok := strings.TrimPrefix(os.Getenv(azureSASEnv), "?"); tok != "" {
		q, err := url.ParseQuery(tok)
		p := sas.NewQueryParameters(q, false)
		if err != nil || p.Signature() == "" {
			return azureAuth{}, fmt.Errorf("%s is not a SAS token (a query with sig=…)", azureSASEnv)
		}
		return azureAuth{sas: tok, sasParams: p}, nil
	}
	if u.Insecure {
		// The SDK sends Entra ID's tokens over https only.
		return azureAuth{}, fmt.Errorf("insecure=true needs %s or %s: Entra ID's tokens are not sent over plain http", azureKeyEnv, azureSASEnv)
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return azureAuth{}, fmt.Errorf("neither %s nor %s is set, and DefaultAzureCredential: %w", azureKeyEnv, azureSASEnv, err)
	}
	return azureAuth{token: cred}, nil
}

// azureServiceURL is the URL of u's account: Azure's own, or, at an
// endpoint, the account's path there (as emulators address it).
func azureServiceURL(u storeurl.URL) string {
	if u.Endpoint == "" {
		return "https://" + u.Account + ".blob.core.windows.net/"
	}
	scheme := "https"
	if u.Insecure {
		scheme = "http"
	}
	return scheme + "://" + u.Endpoint + "/" + u.Account + "/"
}

// client returns a client of the service at serviceURL with a's
// credentials.
func (a azureAuth) client(serviceURL string, opts *service.ClientOptions) (*service.Client, error) {
	switch {
	case a.key != nil:
		return service.NewClientWithSharedKeyCredential(serviceURL, a.key, opts)
	case a.sas != "":
		// The token rides in the URL, and so in every request's.
		return service.NewClientWithNoCredential(serviceURL+"?"+a.sas, opts)
	}
	return service.NewClient(serviceURL, a.token, opts)
}

func openAzureStore(u storeurl.URL) (*azureStore, error) {
	auth, err := azureCredentials(u)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", u.String(), err)
	}
	// The SDK retries 3 times by default but waits up to a minute between
	// tries: brokers retry persisting and listing themselves, and a read
	// falls back to a broker sooner.
	opts := &service.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{
		MaxRetries: azureRetries, RetryDelay: time.Second, MaxRetryDelay: 3 * time.Second}}}
	serviceURL := azureServiceURL(u)
	svc, err := auth.client(serviceURL, opts)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", u.String(), err)
	}
	s := &azureStore{
		svc:          svc,
		container:    svc.NewContainerClient(u.Bucket),
		containerURL: serviceURL + u.Bucket,
		name:         u.Bucket,
		prefix:       u.Prefix,
		url:          u.String(),
		endpoint:     u.Endpoint,
		insecure:     u.Insecure,
		auth:         auth,
	}
	azureUntested.Do(func() {
		slog.Info("fragment store: the Azure Blob store has not been tested against Azure or an emulator (none could be run where it was written); try it on a test container first",
			"store", s.url, "credentials", auth.String())
	})
	return s, nil
}

func (s *azureStore) URL() string { return s.url }

func (s *azureStore) key(f Fragment) string { return s.prefix + f.Name() }

// blob returns the client of blob name.
func (s *azureStore) blob(name string) *blob.Client { return s.container.NewBlobClient(name) }

// blobURL is the URL of blob name, without credentials. (The SDK's own
// escapes the "/" of names, which the service takes as "/": this one is
// the form people and other tools expect.)
func (s *azureStore) blobURL(name string) string { return s.containerURL + "/" + name }

// azureNotExist wraps err with fs.ErrNotExist if it reports a missing
// blob (or container: a HEAD's 404 carries no body to tell which).
func azureNotExist(err error) error {
	var rerr *azcore.ResponseError
	if bloberror.HasCode(err, bloberror.BlobNotFound) || errors.As(err, &rerr) && rerr.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}

// azureExists tells whether err, from an upload under If-None-Match: *,
// says that the blob exists: Azure answers 409 BlobAlreadyExists, and 412
// ConditionNotMet is a condition's failure in general. Other conflicts
// (a lease, a container being deleted) are errors.
func azureExists(err error) bool {
	var rerr *azcore.ResponseError
	if !errors.As(err, &rerr) {
		return false
	}
	return bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) ||
		rerr.StatusCode == http.StatusPreconditionFailed ||
		rerr.StatusCode == http.StatusConflict && rerr.ErrorCode == ""
}

// blobsIn yields the blobs directly in dir (a prefix ending in "/"): with a
// delimiter, those deeper come back as prefixes, which it skips.
func (s *azureStore) blobsIn(ctx context.Context, dir string) iter.Seq2[*container.BlobItem, error] {
	return func(yield func(*container.BlobItem, error) bool) {
		pager := s.container.NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: &dir})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			if page.Segment == nil {
				continue
			}
			for _, b := range page.Segment.BlobItems {
				if b != nil && b.Name != nil && !yield(b, nil) {
					return
				}
			}
		}
	}
}

func (s *azureStore) List(ctx context.Context, journal string, fn func(Fragment) error) error {
	if err := ValidateJournal(journal); err != nil {
		return fmt.Errorf("listing %s: %w", s.url, err)
	}
	for b, err := range s.blobsIn(ctx, s.prefix+journal+"/") {
		if err != nil {
			return fmt.Errorf("listing journal %q in %s: %w", journal, s.url, err)
		}
		f, err := ParseName(strings.TrimPrefix(*b.Name, s.prefix))
		if err != nil {
			slog.Warn("fragment store: skipping object that is not a fragment", "store", s.url, "journal", journal, "key", *b.Name, "err", err)
			continue
		}
		if b.Properties != nil && b.Properties.LastModified != nil {
			f.ModTime = *b.Properties.LastModified
		}
		f.Store = s.url
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// Persist compresses and verifies f's content into a temporary file, then
// uploads it with a single Put Blob, under the condition that no blob has
// its name, so the blob appears whole or not at all. A fragment stored in
// Azure is limited to the 5000 MiB of a single Put Blob.
func (s *azureStore) Persist(ctx context.Context, f Fragment, content io.Reader) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	if _, err := s.blob(s.key(f)).GetProperties(ctx, nil); err == nil {
		return nil // Already persisted: names are content addressed.
	} else if err = azureNotExist(err); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("persisting %s to %s: checking whether it exists: %w", f.Name(), s.url, err)
	}
	tmp, err := compressToTemp(ctx, f, content)
	if err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	if err := s.upload(ctx, s.key(f), tmp, true); err != nil && !azureExists(err) {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	return nil // Or another broker persisted it meanwhile.
}

// compressToTemp compresses and verifies f's content into a new temporary
// file, which it returns positioned at its start.
func compressToTemp(ctx context.Context, f Fragment, content io.Reader) (*os.File, error) {
	tmp, err := os.CreateTemp("", "quire-fragment-*")
	if err != nil {
		return nil, fmt.Errorf("fragment %s: %w", f.Name(), err)
	}
	err = writeCompressed(&ctxWriter{ctx: ctx, w: tmp}, f, content)
	if err == nil {
		if _, err = tmp.Seek(0, io.SeekStart); err != nil {
			err = fmt.Errorf("fragment %s: %w", f.Name(), err)
		}
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	return tmp, nil
}

// upload writes body as blob name with a single Put Blob; if ifAbsent,
// under the condition that no blob has the name.
func (s *azureStore) upload(ctx context.Context, name string, body io.ReadSeeker, ifAbsent bool) error {
	opts := &blockblob.UploadOptions{HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr("application/octet-stream")}}
	if ifAbsent {
		opts.AccessConditions = &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}
	}
	// The SDK would close the body; its owner does.
	_, err := s.container.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(body), opts)
	return err
}

// Open reads the blob under ctx: cancelling ctx fails the reader's
// subsequent reads.
func (s *azureStore) Open(ctx context.Context, f Fragment) (io.ReadCloser, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("opening from %s: %w", s.url, err)
	}
	resp, err := s.blob(s.key(f)).DownloadStream(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("opening %s from %s: %w", f.Name(), s.url, azureNotExist(err))
	}
	return openVerified(f, resp.Body)
}

func (s *azureStore) Remove(ctx context.Context, f Fragment) error {
	return removeWith(ctx, s.url, f, s.removeObject)
}

// SignURL returns a URL of f's blob with a read-only SAS valid for ttl,
// which must be between one second and seven days: signed with the
// account's shared key; or, with a SAS token for credentials, the token
// itself, if it permits reading for ttl; or signed with a user delegation
// key got with Entra ID's credentials (kept for a day or more, so a
// request is made about once a day), which needs Azure's own endpoint. It
// does not check that the blob exists.
func (s *azureStore) SignURL(ctx context.Context, f Fragment, ttl time.Duration) (string, error) {
	if err := checkSign(s.url, f, ttl); err != nil {
		return "", err
	}
	var u string
	var err error
	switch expiry := time.Now().Add(ttl); {
	case s.auth.key != nil:
		u, err = s.signWithKey(s.key(f), expiry)
	case s.auth.sas != "":
		u, err = s.withSAS(s.key(f), expiry)
	default:
		u, err = s.signDelegated(ctx, s.key(f), expiry)
	}
	if err != nil {
		return "", fmt.Errorf("signing a URL for %s in %s: %w", f.Name(), s.url, err)
	}
	return u, nil
}

// sasValues are those of a SAS that lets its holder read blob name until
// expiry. It has no start: it is valid at once, whatever the clocks.
func (s *azureStore) sasValues(name string, expiry time.Time) sas.BlobSignatureValues {
	protocol := sas.ProtocolHTTPS
	if s.insecure {
		protocol = sas.ProtocolHTTPSandHTTP
	}
	return sas.BlobSignatureValues{
		Protocol:      protocol,
		ExpiryTime:    expiry.UTC(),
		Permissions:   (&sas.BlobPermissions{Read: true}).String(),
		ContainerName: s.name,
		BlobName:      name,
	}
}

func (s *azureStore) signWithKey(name string, expiry time.Time) (string, error) {
	q, err := s.sasValues(name, expiry).SignWithSharedKey(s.auth.key)
	if err != nil {
		return "", err
	}
	return s.blobURL(name) + "?" + q.Encode(), nil
}

// withSAS returns the URL of blob name with the store's SAS token, which
// must permit reading until expiry.
func (s *azureStore) withSAS(name string, expiry time.Time) (string, error) {
	p := &s.auth.sasParams
	if !strings.Contains(p.Permissions(), "r") {
		return "", fmt.Errorf("the SAS token of %s does not permit reading (sp=%q)", azureSASEnv, p.Permissions())
	}
	if end := p.ExpiryTime(); !end.IsZero() && end.Before(expiry) {
		return "", fmt.Errorf("the SAS token of %s expires at %s, before the URL would", azureSASEnv, end.UTC().Format(time.RFC3339))
	}
	return s.blobURL(name) + "?" + s.auth.sas, nil
}

func (s *azureStore) signDelegated(ctx context.Context, name string, expiry time.Time) (string, error) {
	if s.endpoint != "" {
		// The SDK names a delegation key's account after the first label
		// of the service's host, which an endpoint's is not.
		return "", fmt.Errorf("a user delegation SAS needs Azure's own endpoint, not %s", s.endpoint)
	}
	cred, err := s.delegationKey(ctx, expiry)
	if err != nil {
		return "", fmt.Errorf("getting a user delegation key: %w", err)
	}
	q, err := s.sasValues(name, expiry).SignWithUserDelegation(cred)
	if err != nil {
		return "", err
	}
	return s.blobURL(name) + "?" + q.Encode(), nil
}

// delegationKey returns a user delegation key valid until expiry at
// least: the one it has, or a new one valid for a day or more (at most
// the seven days Azure allows, as a URL's ttl is).
func (s *azureStore) delegationKey(ctx context.Context, expiry time.Time) (*service.UserDelegationCredential, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delegation != nil && !s.delegationEnd.Before(expiry) {
		return s.delegation, nil
	}
	now := time.Now().UTC()
	end := now.Add(azureDelegationLife)
	if expiry.After(end) {
		end = expiry.UTC() // Signed as the SAS's expiry is: to the second.
	}
	end = end.Truncate(time.Second)
	info := service.KeyInfo{
		Start:  to.Ptr(now.Add(-azureClockSkew).Format(sas.TimeFormat)),
		Expiry: to.Ptr(end.Format(sas.TimeFormat)),
	}
	cred, err := s.svc.GetUserDelegationCredential(ctx, info, nil)
	if err != nil {
		return nil, err
	}
	s.delegation, s.delegationEnd = cred, end
	return cred, nil
}

// The objects of Probe: blobs beneath the prefix, written with a single
// Put Blob as fragments are.

func (s *azureStore) putObject(ctx context.Context, name string, data []byte) error {
	return s.upload(ctx, s.prefix+name, bytes.NewReader(data), false)
}

func (s *azureStore) getObject(ctx context.Context, name string, limit int64) ([]byte, error) {
	resp, err := s.blob(s.prefix+name).DownloadStream(ctx, nil)
	if err != nil {
		return nil, azureNotExist(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = errTooLarge
	}
	return data, err
}

func (s *azureStore) listObjects(ctx context.Context, dir string) ([]string, error) {
	prefix := s.prefix + dir + "/"
	var names []string
	for b, err := range s.blobsIn(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		if base := strings.TrimPrefix(*b.Name, prefix); base != "" {
			names = append(names, base)
		}
	}
	return names, nil
}

func (s *azureStore) removeObject(ctx context.Context, name string) error {
	_, err := s.blob(s.prefix+name).Delete(ctx, nil)
	if err != nil && !errors.Is(azureNotExist(err), fs.ErrNotExist) {
		return err
	}
	return nil
}
