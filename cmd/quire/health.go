package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/internal/env"
)

func newHealthCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [URL]",
		Short: "Exit 0 if a server's admin endpoint says it is ready (for container health checks)",
		Long: `Ask a server's admin endpoint whether it is ready, and exit 0 if it is,
1 if it is not or does not answer, 2 if URL is not one. For containers,
which have no shell or curl: HEALTHCHECK CMD ["/quire", "health"].

URL is http://HOST:PORT/PATH, or HOST:PORT for http://HOST:PORT/readyz;
without it, the server's own $QUIRE_ADMIN is asked (an address it binds
on every interface, such as 0.0.0.0:7704, is asked on this host), else
quire dev's 127.0.0.1:7704. Ask /healthz for liveness instead. The
endpoint's answer is printed.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := env.Or("QUIRE_ADMIN", devAdminAddr)
			if len(args) == 1 {
				target = args[0]
			}
			u, err := healthURL(target)
			if err != nil {
				return usageError{err}
			}
			return checkHealth(cmd.Context(), cmd.OutOrStdout(), u, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for an answer")
	return cmd
}

// healthURL makes a URL of target: http://HOST:PORT/PATH, or HOST:PORT
// for its /readyz.
func healthURL(target string) (*url.URL, error) {
	if target == "" {
		return nil, fmt.Errorf("the URL is empty")
	}
	if !strings.Contains(target, "://") {
		if err := validateHostPort("URL", target); err != nil {
			return nil, fmt.Errorf("%q: want http://HOST:PORT/PATH or HOST:PORT: %w", target, err)
		}
		target = "http://" + target + "/readyz"
	}
	u, err := url.Parse(target)
	switch {
	case err != nil:
		return nil, fmt.Errorf("URL %q: %w", target, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("URL %q: want an http or https URL", target)
	case u.Host == "":
		return nil, fmt.Errorf("URL %q has no host", target)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/readyz"
	}
	return u, nil
}

// checkHealth fails unless u answers 200 within timeout, printing the
// answer: to stdout if healthy, in the error otherwise.
func checkHealth(ctx context.Context, out io.Writer, u *url.URL, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return usageError{fmt.Errorf("URL %s: %w", u, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s does not answer: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return fmt.Errorf("%s: reading its answer: %w", u, err)
	}
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", u, resp.Status, text)
	}
	fmt.Fprintln(out, text)
	return nil
}
