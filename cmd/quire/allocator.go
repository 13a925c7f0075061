package main

import "github.com/spf13/cobra"

func newAllocatorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "allocator",
		Short: "Inspect and plan the allocation of items to members",
	}
	return cmd
}
