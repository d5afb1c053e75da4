package experiment

import "errors"

func runFig5(o Options) error { return errors.New("fig5: not built yet") }
