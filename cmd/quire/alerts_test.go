package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// alertRules is the rule file that deployments load into Prometheus.
var alertRules = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yaml")

// The alerting rules load in Prometheus (their PromQL and templates
// check as Prometheus checks them), each says how bad and what to do,
// and every series they select is one that the product exports from the
// start: a renamed metric, or a label value that only appears on its
// first event, would leave an alert that never fires.
func TestAlertRules(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(alertRules, false, model.UTF8Validation, p, nil)
	if len(errs) > 0 {
		t.Fatalf("%s does not load: %v", alertRules, errs)
	}
	var selectors []selectorOf
	names := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if !strings.HasPrefix(r.Alert, "Quire") || names[r.Alert] {
				t.Errorf("group %s: alert %q: want a name starting with Quire, once", g.Name, r.Alert)
			}
			names[r.Alert] = true
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, sev)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", r.Alert)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %v", r.Alert, err)
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					selectors = append(selectors, selectorOf{r.Alert, vs})
				}
				return nil
			})
		}
	}
	if len(names) < 10 {
		t.Fatalf("%d alerts in %s: the file lost its rules", len(names), alertRules)
	}

	// quire dev runs a broker, the word count's consumer process and
	// both fleets' allocators: every kind of server there is. Series
	// labelled by shard appear once its primary serves: wait for them.
	ports := freeDevPorts(t)
	startDev(t, t.TempDir(), ports)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports.admin)
	var missing []selectorOf
	for deadline := time.Now().Add(30 * time.Second); ; {
		series := scrape(t, url)
		missing = missing[:0]
		for _, s := range selectors {
			if !s.matchesAny(series) {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range missing {
		t.Errorf("%s selects %s, which quire dev does not export", s.alert, s.sel)
	}
}

type selectorOf struct {
	alert string
	sel   *parser.VectorSelector
}

// matchesAny says whether any of series matches every matcher of s.
func (s selectorOf) matchesAny(series []labels.Labels) bool {
	for _, ls := range series {
		if matchAll(s.sel.LabelMatchers, ls) {
			return true
		}
	}
	return false
}

func matchAll(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// scrape returns the series of a /metrics page, each with its __name__,
// as Prometheus stores them (a histogram's _bucket, _sum and _count).
func scrape(t *testing.T, url string) []labels.Labels {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	var out []labels.Labels
	for name, f := range families {
		for _, m := range f.GetMetric() {
			b := labels.NewBuilder(labels.EmptyLabels())
			for _, l := range m.GetLabel() {
				b.Set(l.GetName(), l.GetValue())
			}
			for _, suffix := range seriesSuffixes(f.GetType()) {
				b.Set(labels.MetricName, name+suffix)
				out = append(out, b.Labels())
			}
		}
	}
	return out
}

func seriesSuffixes(typ dto.MetricType) []string {
	switch typ {
	case dto.MetricType_HISTOGRAM:
		return []string{"_bucket", "_sum", "_count"}
	case dto.MetricType_SUMMARY:
		return []string{"", "_sum", "_count"}
	}
	return []string{""}
}
