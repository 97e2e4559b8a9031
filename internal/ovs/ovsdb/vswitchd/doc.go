// Package vswitchd holds the libovsdb models generated from the Open_vSwitch database schema.
package vswitchd

//go:generate go tool modelgen -p vswitchd -o . vswitch.ovsschema
