// Package ovsdb manages winnet's bridges, ports and interfaces in the Open vSwitch database through libovsdb.
package ovsdb
