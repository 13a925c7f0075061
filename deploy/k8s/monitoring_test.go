package k8s_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// renderWithMonitoring renders the base with the monitoring component, as
// an overlay of a user's would (testdata/monitored).
func renderWithMonitoring(t *testing.T) *cluster {
	t.Helper()
	return render(t, filepath.Join("testdata", "monitored"))
}

// The PodMonitor scrapes every broker and consumer process at the port
// and path where it serves its metrics, in the namespace it is applied
// to, and selects no pod of the cluster that serves none.
func TestPodMonitorScrapesEveryServer(t *testing.T) {
	c := renderWithMonitoring(t)
	if len(c.podMonitors) != 1 {
		t.Fatalf("%d PodMonitors, want 1", len(c.podMonitors))
	}
	pm := c.podMonitors[0]
	if pm.Namespace != "monitored" || pm.Spec.NamespaceSelector.Any || len(pm.Spec.NamespaceSelector.MatchNames) > 0 {
		t.Errorf("PodMonitor in %q selecting namespaces %+v: want the overlay's namespace, its own", pm.Namespace, pm.Spec.NamespaceSelector)
	}
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("endpoints %+v, want one", pm.Spec.PodMetricsEndpoints)
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || ep.Path != "/metrics" {
		t.Fatalf("endpoint %+v: want a named port and /metrics", ep)
	}
	for _, r := range []role{broker, consumer} {
		ws, cs := ofRole(c, r)
		if len(cs) == 0 {
			t.Errorf("no %s in the rendering", r)
		}
		for i, ctr := range cs {
			if !sel.Matches(labels.Set(ws[i].template.Labels)) {
				t.Errorf("%s: its pods (labels %v) are not selected by %v", ws[i], ws[i].template.Labels, sel)
			}
			port := int32(-1)
			for _, p := range ctr.Ports {
				if p.Name == *ep.Port {
					port = p.ContainerPort
				}
			}
			if admin := c.listens(t, ws[i], ctr).admin; port != admin {
				t.Errorf("%s: port %q is %d, but its metrics are on %d", ws[i], *ep.Port, port, admin)
			}
		}
	}
}

// The PrometheusRule holds the rules of deploy/prometheus/alerts.yaml,
// which TestAlertRules checks, exactly.
func TestPrometheusRuleIsTheAlertsFile(t *testing.T) {
	c := renderWithMonitoring(t)
	if len(c.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(c.rules))
	}
	file, err := os.ReadFile(filepath.Join("..", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want, got struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(file, &want); err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(c.rules[0].Spec)
	if err == nil {
		err = yaml.Unmarshal(data, &got)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(got.Groups, want.Groups) {
		t.Errorf("the PrometheusRule's groups differ from alerts.yaml's:\n%s", data)
	}
}
