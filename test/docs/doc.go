// Package docs checks that what README.md and docs/ quote exists: every `make` target, every
// subcommand and flag of winnet's commands, every Helm value set with --set. A renamed flag or
// target fails `make test` until the docs follow. (Generated pages, the API reference and the
// pipeline's tables, are checked by `make verify` instead.)
package docs
