// Package pipeline declares winnet's OpenFlow tables and register marks in one place and builds,
// as pure functions of a node's network model, the flows of each feature.
package pipeline

//go:generate go run ./gendoc ../../docs/pipeline.md
