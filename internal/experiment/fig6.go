package experiment

import "errors"

func runFig6(o Options) error { return errors.New("fig6: not built yet") }
