package experiment

import "errors"

func runBCR(o Options) error { return errors.New("bcr: not built yet") }
