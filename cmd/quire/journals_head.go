package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

// ---- reset-head ----

func newJournalsResetHeadCommand(jf *journalsFlags) *cobra.Command {
	var selector string
	var dryRun, yes bool
	cmd := &cobra.Command{
		Use:   "reset-head (-l SELECTOR | NAME...) [--dry-run] [--yes]",
		Short: "Move journals' write heads to the end of the content their stores hold",
		Long: `Move the write head of each selected journal forward to the end of the
content its fragment stores hold, when that is past the head: after
fragments were restored to a store from a backup, or after every broker
of a journal lost its disk and the stores hold more than the brokers
found. Appends then go on after the stored content, never over it.

Brokers do the same by themselves at their next listing of the stores
(every fragment.refreshInterval, 1m by default); reset-head does it now.
A write head never moves back: a journal whose head is at or past the
stored content's end is left alone (content after the stored end that
no broker holds any more is gone; reads jump past it).

reset-head lists each journal's stores through its brokers, prints each
move, and asks for confirmation on standard input unless --yes is given;
--dry-run prints the moves and changes nothing.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runResetHead(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, selector, args, dryRun, yes)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the journals")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the moves, and move nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "move without asking for confirmation")
	return cmd
}

// headMove is a write head to move, from the head to the stored end.
type headMove struct {
	journal          string
	head, storedEnd  int64
	fragmentsPastEnd int
}

func runResetHead(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, jf *journalsFlags,
	selector string, names []string, dryRun, yes bool) error {
	c, js, err := jf.selected(ctx, selector, names, false, "no write head was moved")
	if err != nil {
		return err
	}
	defer c.Close()
	var moves []headMove
	for _, j := range js {
		m, err := jf.headMove(ctx, c, j.GetSpec().GetName())
		if err != nil {
			return err
		}
		if m.storedEnd <= m.head {
			fmt.Fprintf(stderr, "%s: write head %d is at or past the end of the stored content (%d): left alone\n", m.journal, m.head, m.storedEnd)
			continue
		}
		moves = append(moves, m)
		fmt.Fprintf(stdout, "%s: write head %d → %d (%d stored fragments end past the head)%s\n",
			m.journal, m.head, m.storedEnd, m.fragmentsPastEnd, orDryRun(dryRun))
	}
	if len(moves) == 0 || dryRun {
		return nil
	}
	if !yes && !confirm(stdin, stderr, fmt.Sprintf("move %d write head%s?", len(moves), plural(int64(len(moves))))) {
		return fmt.Errorf("not confirmed: no write head was moved")
	}
	for _, m := range moves {
		if err := jf.moveHead(ctx, c, m); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: write head moved to %d\n", m.journal, m.storedEnd)
	}
	return nil
}

func orDryRun(dryRun bool) string {
	if dryRun {
		return " (dry run)"
	}
	return ""
}

// headMove finds journal's write head and the end of the content its
// stores hold, as its brokers list them now.
func (jf *journalsFlags) headMove(ctx context.Context, c *client.Client, journal string) (headMove, error) {
	m := headMove{journal: journal}
	lctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	head, err := c.WriteHead(lctx, journal)
	if err != nil {
		return m, jf.brokerError("reading the write head of "+journal, err)
	}
	infos, err := c.ListFragments(lctx, &protocol.FragmentsRequest{Journal: journal, Refresh: true})
	if err != nil {
		return m, jf.brokerError("listing fragments of "+journal, err)
	}
	m.head = head
	for _, info := range infos {
		f := info.GetFragment()
		if f.GetStore() == "" {
			continue // Only spooled: the brokers hold it, at or before the head.
		}
		m.storedEnd = max(m.storedEnd, f.GetEnd())
		if f.GetEnd() > head {
			m.fragmentsPastEnd++
		}
	}
	return m, nil
}

// moveHead appends nothing at the stored end, which brokers take as the
// request to roll the journal's write head forward to it.
func (jf *journalsFlags) moveHead(ctx context.Context, c *client.Client, m headMove) error {
	actx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	at := m.storedEnd
	commit, err := c.Append(actx, client.AppendRequest{Journal: m.journal, Offset: &at}, nil)
	if err != nil {
		return jf.brokerError(fmt.Sprintf("moving the write head of %s to %d", m.journal, at), err)
	}
	if commit.GetEnd() != at {
		return fmt.Errorf("moving the write head of %s to %d: the broker answered at %d", m.journal, at, commit.GetEnd())
	}
	return nil
}

// confirm asks question on stderr and reads a yes from stdin.
func confirm(stdin io.Reader, stderr io.Writer, question string) bool {
	fmt.Fprintf(stderr, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true
	}
	return false
}
