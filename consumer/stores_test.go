package consumer_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// jsonCounter counts into a recorded JSONFile store.
type jsonCounter struct{ counter }

func (jsonCounter) NewStore(sh *consumer.Shard) (store.Store, error) {
	return store.OpenJSONFile[map[string]uint64](sh.FS(), sh.Dir())
}

func (jsonCounter) Consume(_ *consumer.Shard, st store.Store, env consumer.Envelope) error {
	st.(*store.JSONFile[map[string]uint64]).State[env.Message.(*countMsg).Key]++
	return nil
}

// sqliteCounter counts into a table of a recorded SQLite store.
type sqliteCounter struct{ counter }

func (sqliteCounter) NewStore(sh *consumer.Shard) (store.Store, error) {
	return store.OpenSQLite(sh.Context(), sh.FS(), sh.Dir(), store.SQLiteOptions{})
}

func (sqliteCounter) Consume(sh *consumer.Shard, st store.Store, env consumer.Envelope) error {
	tx, err := st.(*store.SQLite).Tx(sh.Context())
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(sh.Context(), `CREATE TABLE IF NOT EXISTS counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		return err
	}
	_, err = tx.ExecContext(sh.Context(), `INSERT INTO counts (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1`,
		env.Message.(*countMsg).Key)
	return err
}

// sqlCounter counts into a table of PostgreSQL, through an SQL store.
type sqlCounter struct {
	counter
	db    *sql.DB
	table string
}

func (a sqlCounter) NewStore(sh *consumer.Shard) (store.Store, error) {
	return store.OpenSQL(sh.Context(), a.db, sh.ID(), store.SQLOptions{Table: a.table + "_checkpoints"})
}

func (a sqlCounter) Consume(sh *consumer.Shard, st store.Store, env consumer.Envelope) error {
	tx, err := st.(*store.SQL).Tx(sh.Context())
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(sh.Context(), fmt.Sprintf(
		`INSERT INTO %s (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = %s.n + 1`, a.table, a.table),
		env.Message.(*countMsg).Key)
	return err
}

// TestStoresFailOver counts with the JSONFile and SQLite stores (recorded)
// and the SQL store (no recovery log; skipped without QUIRE_POSTGRES),
// killing the primary's process midway: each message counts once.
func TestStoresFailOver(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		c := newCluster(t, sqliteCounter{})
		counts := func(shard string) map[string]uint64 {
			res := c.resolveLocal(shard)
			defer res.Done()
			tx, err := res.Store.(*store.SQLite).Tx(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return queryCounts(t, tx, "counts")
		}
		failOver(t, c, c.shardSpec("counts/sqlite", 1, "counts/sqlite-in"), counts)
	})
	t.Run("jsonfile", func(t *testing.T) {
		c := newCluster(t, jsonCounter{})
		counts := func(shard string) map[string]uint64 {
			res := c.resolveLocal(shard)
			defer res.Done()
			return maps.Clone(res.Store.(*store.JSONFile[map[string]uint64]).State)
		}
		failOver(t, c, c.shardSpec("counts/json", 1, "counts/json-in"), counts)
	})
	t.Run("sql", func(t *testing.T) {
		dsn := os.Getenv("QUIRE_POSTGRES")
		if dsn == "" {
			t.Skip("QUIRE_POSTGRES is not set: no PostgreSQL to test the SQL store against")
		}
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		table := "counts_" + strings.NewReplacer("/", "_", "-", "_").Replace(strings.ToLower(t.Name()))
		// The store's checkpoints table too: a run's checkpoint left behind
		// would make the next run's shard skip what it publishes.
		if _, err := db.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s_checkpoints; CREATE TABLE %s (key TEXT PRIMARY KEY, n BIGINT NOT NULL)`, table, table, table)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // As the test found the server.
			db.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s_checkpoints`, table, table))
		})

		c := newCluster(t, sqlCounter{db: db, table: table})
		counts := func(string) map[string]uint64 { return queryCounts(t, db, table) }
		spec := &consumer.ShardSpec{ID: "counts/sql", HotStandbys: 1, Sources: []consumer.Source{{Journal: "counts/sql-in"}}}
		failOver(t, c, spec, counts)
	})
}

// queryCounts reads the keys and counts of table.
func queryCounts(t *testing.T, q interface {
	Query(string, ...any) (*sql.Rows, error)
}, table string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	rows, err := q.Query(fmt.Sprintf(`SELECT key, n FROM %s`, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n uint64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// failOver publishes, kills the shard's primary, publishes more, and
// checks the counts.
func failOver(t *testing.T, c *cluster, spec *consumer.ShardSpec, counts func(string) map[string]uint64) {
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	journals := []string{spec.Sources[0].Journal}
	if spec.RecoveryLog() != "" {
		journals = append(journals, spec.RecoveryLog())
	}
	c.brokers.Journals(c.journals, 3, journals...)
	c.applySpecs(spec)
	p := c.publisher()
	in := spec.Sources[0].Journal
	for i := range 50 {
		p.publish(t, in, &countMsg{Key: fmt.Sprintf("k%d", i%5)})
	}
	c.stat(spec.ID, p.ends)
	c.awaitStandby(spec.ID)
	c.fleet.Kill(c.primaryOf(spec.ID, protocol.ReplicaCode_PRIMARY))
	for i := range 50 {
		p.publish(t, in, &countMsg{Key: fmt.Sprintf("k%d", i%5)})
	}
	c.stat(spec.ID, p.ends)
	got := counts(spec.ID)
	for i := range 5 {
		if k := fmt.Sprintf("k%d", i); got[k] != 20 {
			t.Errorf("count of %s = %d, want 20 (all: %v)", k, got[k], got)
		}
	}
}

// resolveLocal returns the resolution of shard at its primary's process.
func (c *cluster) resolveLocal(shard string) consumer.Resolution {
	c.t.Helper()
	p := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
	res, err := p.Server.Resolve(context.Background(), shard)
	if err != nil || res.Store == nil {
		c.t.Fatalf("resolving %s at %s: %v", shard, p.Name, err)
	}
	return res
}

var _ message.Message = (*countMsg)(nil)
