//go:build !linux && !windows

package securefs

import (
	"errors"
	"io/fs"
	"os"
)

func mkdirAll(string, Access) error                        { return errors.ErrUnsupported }
func checkPath(string, Access, bool) error                 { return errors.ErrUnsupported }
func repairPath(string, fs.DirEntry, Access) (bool, error) { return false, errors.ErrUnsupported }
func protectFile(*os.File, Access) error                   { return errors.ErrUnsupported }
func openNoFollow(string) (*os.File, error)                { return nil, errors.ErrUnsupported }

func createNew(string, Access) (*os.File, error) { return nil, errors.ErrUnsupported }

func openAppend(string) (*os.File, error)           { return nil, errors.ErrUnsupported }
func createAppend(string, Access) (*os.File, error) { return nil, errors.ErrUnsupported }
