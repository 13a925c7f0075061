package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// ---- suspend, resume ----

func newJournalsSuspendCommand(jf *journalsFlags, resume bool) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "suspend (-l SELECTOR | NAME...)",
		Short: "Suspend journals: persist their content and release their brokers",
		Long: `Suspend each selected journal: its primary rolls its spool, waits until
every fragment is in the journal's store, and records the write head and
the journal's registers in its spec; the brokers then release its
replicas, so that the journal holds no spool and no broker resources.

A suspended journal is still read: any broker serves its content from its
stores. The next append resumes it: it gets replicas again and goes on
at the recorded write head, with the recorded registers (writers'
idempotence and a recovery log's author carry over). 'quire journals
resume' resumes a journal without appending.

Brokers started with --suspend-idle DURATION suspend the journals they
are primary of once no one appended to them for that long.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSuspend(cmd.Context(), cmd.OutOrStdout(), jf, selector, args, resume)
		},
	}
	if resume {
		cmd.Use = "resume (-l SELECTOR | NAME...)"
		cmd.Short = "Resume suspended journals"
		cmd.Long = `Resume each selected journal that is suspended (see 'quire journals
suspend'): the brokers give it replicas again, and it goes on at the
write head recorded when it was suspended. An append to a suspended
journal does the same.`
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the journals")
	return cmd
}

func runSuspend(ctx context.Context, stdout io.Writer, jf *journalsFlags, selector string, names []string, resume bool) error {
	verb, undone := "suspending ", "nothing was suspended"
	if resume {
		verb, undone = "resuming ", "nothing was resumed"
	}
	c, js, err := jf.selected(ctx, selector, names, false, undone)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, j := range js {
		name, was := j.GetSpec().GetName(), j.GetSpec().Suspended()
		sctx, cancel := context.WithTimeout(ctx, jf.timeout)
		sp, err := c.Suspend(sctx, name, resume)
		cancel()
		if err != nil {
			return jf.brokerError(verb+name, err)
		}
		switch {
		case resume && !was:
			fmt.Fprintf(stdout, "%s: not suspended\n", name)
		case resume:
			fmt.Fprintf(stdout, "%s: resumed at offset %d\n", name, sp.GetOffset())
		case was:
			fmt.Fprintf(stdout, "%s: already suspended at offset %d, since %s\n", name, sp.GetOffset(),
				time.Unix(sp.GetTime(), 0).UTC().Format(time.RFC3339))
		default:
			fmt.Fprintf(stdout, "%s: suspended at offset %d\n", name, sp.GetOffset())
		}
	}
	return nil
}
