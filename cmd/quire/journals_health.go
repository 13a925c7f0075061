package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/protocol"
)

// ---- store-health ----

func newJournalsStoreHealthCommand(jf *journalsFlags) *cobra.Command {
	var selector, output string
	var stores []string
	cmd := &cobra.Command{
		Use:   "store-health [-l SELECTOR] [--store URL]… [-o table|json|yaml]",
		Short: "Check that every broker can write, read, list and delete in the fragment stores",
		Long: `Ask every broker of the fleet to check its default fragment store, the stores
of the selected journals (all, without -l) and the stores given with --store:
each broker writes a small probe object under !quire-store-health/ in the
store (a directory that no journal can have, so a probe is never taken
for a fragment), reads it back and compares, lists the directory, and
removes the probe.

The broker that --broker reaches asks the others, which it finds by their
member keys in etcd, and reports for all of them; a broker it cannot
reach is reported with the error. Exits 1 if any store fails, or any
broker cannot be asked.

  table  BROKER (zone#suffix), STORE (the broker's default marked *),
         JOURNALS (of the selected, how many use it), STATUS (ok, or the
         step that failed: open, write, read, list, delete), the latency
         of each step that passed, and the error
  json   {"healthy", "brokers": [{"broker", "endpoint", "error", "stores":
         [{"url", "default", "journals", "ok", "failedStep", "error",
         "steps": [{"step", "latency"}]}]}]}
  yaml   the same as YAML

Needs LIST (on the journals whose stores it checks); --store needs APPLY
as well, since the brokers write where it says (docs/security.md).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStoreHealth(cmd.Context(), cmd.OutOrStdout(), jf, selector, stores, output)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the journals whose stores to check, such as app=hello")
	cmd.Flags().StringArrayVar(&stores, "store", nil, "a store URL to check as well (repeatable)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func runStoreHealth(ctx context.Context, stdout io.Writer, jf *journalsFlags, selector string, stores []string, output string) error {
	if err := checkOutput(output, "table", "json", "yaml"); err != nil {
		return err
	}
	if err := parseSelectorFlag("--selector", selector); err != nil {
		return err
	}
	req := &protocol.StoreHealthRequest{Selector: selector, Stores: stores}
	if err := req.Validate(); err != nil {
		return usagef("--store: %w", err)
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	resp, err := c.StoreHealth(ctx, req)
	if err != nil {
		return jf.brokerError("checking stores", err)
	}
	report := storeHealthReport(resp)
	var out []byte
	switch output {
	case "json":
		out, err = formatJSON(report)
	case "yaml":
		out, err = yaml.Marshal(report)
	default:
		out = storeHealthTable(report)
	}
	if err != nil {
		return err
	}
	if _, err := stdout.Write(out); err != nil {
		return err
	}
	if !report.Healthy {
		return fmt.Errorf("%s", report.summary())
	}
	return nil
}

// The JSON (and YAML) form of `journals store-health`.
type (
	storeHealthReportJSON struct {
		Healthy bool                `json:"healthy" yaml:"healthy"`
		Brokers []brokerStoreHealth `json:"brokers" yaml:"brokers"`
	}
	brokerStoreHealth struct {
		Broker   string           `json:"broker" yaml:"broker"` // zone#suffix
		Endpoint string           `json:"endpoint" yaml:"endpoint"`
		Error    string           `json:"error,omitempty" yaml:"error,omitempty"`
		Stores   []oneStoreHealth `json:"stores" yaml:"stores"`
	}
	oneStoreHealth struct {
		URL        string        `json:"url" yaml:"url"`
		Default    bool          `json:"default" yaml:"default"`
		Journals   int32         `json:"journals" yaml:"journals"`
		OK         bool          `json:"ok" yaml:"ok"`
		FailedStep string        `json:"failedStep,omitempty" yaml:"failedStep,omitempty"`
		Error      string        `json:"error,omitempty" yaml:"error,omitempty"`
		Steps      []stepLatency `json:"steps" yaml:"steps"`
	}
	stepLatency struct {
		Step    string `json:"step" yaml:"step"`
		Latency string `json:"latency" yaml:"latency"` // Go's form, to the microsecond
	}
)

// stepName is a StoreStep as the CLI writes it: "write".
func stepName(s protocol.StoreStep) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STORE_"))
}

func storeHealthReport(resp *protocol.StoreHealthResponse) storeHealthReportJSON {
	out := storeHealthReportJSON{Healthy: true, Brokers: []brokerStoreHealth{}}
	for _, b := range resp.GetBrokers() {
		bh := brokerStoreHealth{Broker: allocator.MemberName(b.GetProcessId().GetZone(), b.GetProcessId().GetSuffix()),
			Endpoint: b.GetEndpoint(), Error: b.GetError(), Stores: []oneStoreHealth{}}
		if bh.Error != "" {
			out.Healthy = false
		}
		for _, st := range b.GetStores() {
			sh := oneStoreHealth{URL: st.GetUrl(), Default: st.GetDefaultStore(), Journals: st.GetJournals(),
				OK: st.GetOk(), Error: st.GetError(), Steps: []stepLatency{}}
			if !sh.OK {
				out.Healthy = false
				sh.FailedStep = stepName(st.GetFailedStep())
			}
			for _, p := range st.GetPassed() {
				sh.Steps = append(sh.Steps, stepLatency{Step: stepName(p.GetStep()),
					Latency: p.GetLatency().AsDuration().Round(time.Microsecond).String()})
			}
			bh.Stores = append(bh.Stores, sh)
		}
		out.Brokers = append(out.Brokers, bh)
	}
	return out
}

// summary says what failed, for the error of an unhealthy report.
func (r storeHealthReportJSON) summary() string {
	var stores, total, brokers int
	for _, b := range r.Brokers {
		if b.Error != "" {
			brokers++
		}
		for _, st := range b.Stores {
			total++
			if !st.OK {
				stores++
			}
		}
	}
	var parts []string
	if stores > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d store checks failed", stores, total))
	}
	if brokers > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d brokers could not be asked", brokers, len(r.Brokers)))
	}
	return "unhealthy: " + strings.Join(parts, "; ")
}

func storeHealthTable(r storeHealthReportJSON) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "BROKER\tSTORE\tJOURNALS\tSTATUS\tLATENCY\tERROR")
	for _, br := range r.Brokers {
		if br.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\tunreachable\t-\t%s\n", br.Broker, oneLine(br.Error))
		}
		for _, st := range br.Stores {
			url := st.URL
			if st.Default {
				url += " *"
			}
			status := "ok"
			if !st.OK {
				status = st.FailedStep + " failed"
			}
			var lat []string
			for _, s := range st.Steps {
				lat = append(lat, s.Step+" "+s.Latency)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", br.Broker, url, st.Journals, status,
				orDash(strings.Join(lat, ", ")), orDash(oneLine(st.Error)))
		}
	}
	tw.Flush()
	return b.Bytes()
}

// oneLine keeps an error on its table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
