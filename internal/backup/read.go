package backup

// Objects checks the finished backup in dir (its manifest, and each
// volume file's size, SHA-256 and layout before any of its objects is
// passed on) and calls each with every object, volume by volume in the
// manifest's order, each volume's in key order. It returns the manifest;
// the first error each returns stops it. A checker reads a backup with
// it (catena-lab torture -backup).
func Objects(dir string, each func(Volume, Object) error) (Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return m, err
	}
	for _, v := range m.Volumes {
		if err := readVolumeFile(dir, v, func(o Object) error { return each(v, o) }); err != nil {
			return m, err
		}
	}
	return m, nil
}
