// Package dirsync makes a directory's entries durable: after a file is
// created or renamed in it, fsync of the directory keeps the name from
// vanishing at a power loss with the file's contents safely written.
package dirsync

import (
	"errors"
	"os"
)

// Sync fsyncs the directory dir.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
