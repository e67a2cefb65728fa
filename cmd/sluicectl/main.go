// Command sluicectl is sluice's command-line tool for users and operators:
//
//	sluicectl submit --key sk_dev_… 'payload'     submit a job
//	sluicectl stats                               queue depths
//	sluicectl limits acme                         a tenant's effective limits
//	sluicectl dlq list|show|replay|status|cancel|redrive
//	sluicectl worker --fail poison                a logging worker
//	sluicectl completion bash|zsh|fish            shell completion
//
// sluicectl help lists every command; sluicectl <command> --help its flags.
// The commands live in internal/ctl.
package main

import "github.com/sluice-dev/sluice/internal/ctl"

func main() { ctl.Main() }
