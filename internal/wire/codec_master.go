package wire

// The codec of the messages of the master: servers' heartbeats and
// their replies, configurations, status, keyspaces, users and roles,
// and Raft between its members (codec.go describes the format).

import "encoding/binary"

// appendHeartbeat appends a Heartbeat's fields (no type byte).
func appendHeartbeat(b []byte, m *Heartbeat) []byte {
	b = binary.AppendUvarint(b, m.Incarnation)
	b = binary.AppendVarint(b, int64(m.SentAt))
	b = appendVolumeStatuses(b, m.Volumes)
	b = binary.AppendVarint(b, int64(m.Heard))
	b = binary.AppendUvarint(b, m.AuthVersion)
	b = appendBool(b, m.NewDataDir)
	b = appendU32(b, m.MinProtocol)
	return appendU32(b, m.MaxProtocol)
}

// decodeHeartbeat decodes a Heartbeat's fields.
func decodeHeartbeat(d *decoder) Message {
	x := &Heartbeat{}
	x.Incarnation = d.uvarint("Incarnation")
	x.SentAt = Time(d.varint("SentAt"))
	x.Volumes = d.volumeStatuses("Volumes", "Volumes")
	x.Heard = Time(d.varint("Heard"))
	x.AuthVersion = d.uvarint("AuthVersion")
	x.NewDataDir = d.bool("NewDataDir")
	x.MinProtocol = uint32(d.volume("MinProtocol"))
	x.MaxProtocol = uint32(d.volume("MaxProtocol"))
	return x
}

// appendHeartbeatReply appends a HeartbeatReply's fields (no type byte).
func appendHeartbeatReply(b []byte, m *HeartbeatReply) []byte {
	b = binary.AppendVarint(b, int64(m.SentAt))
	b = appendBool(b, m.LeaseGranted)
	b = binary.AppendVarint(b, int64(m.LeaseFor))
	b = appendConfigs(b, m.Configs)
	b = appendKeyspaces(b, m.Keyspaces)
	b = appendSites(b, m.Sites)
	b = binary.AppendUvarint(b, uint64(len(m.Stable)))
	for i := range m.Stable {
		var at int
		b, at = openStruct(b)
		b = appendU32(b, uint32(m.Stable[i].Volume))
		b = appendVector(b, m.Stable[i].Vector)
		b = closeStruct(b, at)
	}
	b = appendString(b, m.Cluster)
	b = appendBool(b, m.Auth != nil)
	if m.Auth != nil {
		b = appendAuthTable(b, m.Auth)
	}
	b = appendBool(b, m.Returning)
	b = appendU32(b, m.ClusterVersion)
	if m.WallTime != 0 { // appended after 0.1.0, left out when zero
		b = binary.AppendVarint(b, int64(m.WallTime))
	}
	return b
}

// decodeHeartbeatReply decodes a HeartbeatReply's fields.
func decodeHeartbeatReply(d *decoder) Message {
	x := &HeartbeatReply{}
	x.SentAt = Time(d.varint("SentAt"))
	x.LeaseGranted = d.bool("LeaseGranted")
	x.LeaseFor = Time(d.varint("LeaseFor"))
	x.Configs = d.configs("Configs")
	x.Keyspaces = d.keyspaces("Keyspaces")
	x.Sites = d.sites("Sites")
	if n := d.count("Stable", minVolumeVector); n > 0 {
		x.Stable = make([]VolumeVector, n)
		prev := d.nest("Stable")
		for i := range x.Stable {
			rest := d.enter("")
			x.Stable[i].Volume = d.volume("Volume")
			x.Stable[i].Vector = d.vector("Vector")
			d.leave(rest)
		}
		d.prefix = prev
	}
	x.Cluster = d.string("Cluster")
	if d.bool("Auth") {
		x.Auth = &AuthTable{}
		d.authTable(x.Auth, "Auth")
	}
	x.Returning = d.bool("Returning")
	x.ClusterVersion = uint32(d.volume("ClusterVersion"))
	if len(d.b) > 0 { // appended after 0.1.0
		x.WallTime = Time(d.varint("WallTime"))
	}
	return x
}

// appendNewConfig appends a NewConfig's fields (no type byte).
func appendNewConfig(b []byte, m *NewConfig) []byte {
	b = appendConfig(b, &m.Config)
	return b
}

// decodeNewConfig decodes a NewConfig's fields.
func decodeNewConfig(d *decoder) Message {
	x := &NewConfig{}
	d.config(&x.Config, "Config")
	return x
}

// appendConfigRequest appends a ConfigRequest's fields (no type byte).
func appendConfigRequest(b []byte, m *ConfigRequest) []byte {
	b = appendString(b, m.Cluster)
	return b
}

// decodeConfigRequest decodes a ConfigRequest's fields.
func decodeConfigRequest(d *decoder) Message {
	return &ConfigRequest{Cluster: d.string("Cluster")}
}

// appendConfigReply appends a ConfigReply's fields (no type byte).
func appendConfigReply(b []byte, m *ConfigReply) []byte {
	b = appendConfigs(b, m.Configs)
	b = appendNodeIDs(b, m.Masters)
	b = appendString(b, string(m.Leader))
	b = appendKeyspaces(b, m.Keyspaces)
	b = appendString(b, m.Cluster)
	if m.ClusterVersion != 0 { // appended after 0.1.0, left out when zero
		b = appendU32(b, m.ClusterVersion)
	}
	return b
}

// decodeConfigReply decodes a ConfigReply's fields.
func decodeConfigReply(d *decoder) Message {
	x := &ConfigReply{}
	x.Configs = d.configs("Configs")
	x.Masters = d.nodeIDs("Masters")
	x.Leader = NodeID(d.string("Leader"))
	x.Keyspaces = d.keyspaces("Keyspaces")
	x.Cluster = d.string("Cluster")
	if len(d.b) > 0 { // appended after 0.1.0
		x.ClusterVersion = uint32(d.volume("ClusterVersion"))
	}
	return x
}

// appendStatusRequest appends a StatusRequest's fields (no type byte).
func appendStatusRequest(b []byte, _ *StatusRequest) []byte { return b }

// decodeStatusRequest decodes a StatusRequest's fields.
func decodeStatusRequest(d *decoder) Message {
	return &StatusRequest{}
}

// appendStatusReply appends a StatusReply's fields (no type byte).
func appendStatusReply(b []byte, m *StatusReply) []byte {
	b = appendConfigs(b, m.Configs)
	b = binary.AppendUvarint(b, uint64(len(m.Servers)))
	for i := range m.Servers {
		s := &m.Servers[i]
		var at int
		b, at = openStruct(b)
		b = appendString(b, string(s.ID))
		b = appendBool(b, s.Alive)
		b = binary.AppendUvarint(b, s.Incarnation)
		b = appendVolumeStatuses(b, s.Volumes)
		b = appendU32(b, s.MinProtocol)
		b = appendU32(b, s.MaxProtocol)
		b = closeStruct(b, at)
	}
	b = appendNodeIDs(b, m.Masters)
	b = appendString(b, string(m.Leader))
	b = appendKeyspaces(b, m.Keyspaces)
	b = appendU32(b, uint32(m.Site))
	b = appendSites(b, m.Sites)
	b = appendString(b, m.Cluster)
	return appendU32(b, m.ClusterVersion)
}

// decodeStatusReply decodes a StatusReply's fields.
func decodeStatusReply(d *decoder) Message {
	x := &StatusReply{}
	x.Configs = d.configs("Configs")
	if n := d.count("Servers", minServerStatus); n > 0 {
		x.Servers = make([]ServerStatus, n)
		for i := range x.Servers {
			d.serverStatus(&x.Servers[i])
		}
	}
	x.Masters = d.nodeIDs("Masters")
	x.Leader = NodeID(d.string("Leader"))
	x.Keyspaces = d.keyspaces("Keyspaces")
	x.Site = SiteID(d.volume("Site"))
	x.Sites = d.sites("Sites")
	x.Cluster = d.string("Cluster")
	x.ClusterVersion = uint32(d.volume("ClusterVersion"))
	return x
}

// appendVersionRequest appends a VersionRequest's fields (no type byte).
func appendVersionRequest(b []byte, m *VersionRequest) []byte {
	return appendU32(b, m.Finalize)
}

// decodeVersionRequest decodes a VersionRequest's fields.
func decodeVersionRequest(d *decoder) Message {
	return &VersionRequest{Finalize: uint32(d.volume("Finalize"))}
}

// appendVersionReply appends a VersionReply's fields (no type byte).
func appendVersionReply(b []byte, m *VersionReply) []byte {
	b = appendString(b, m.Err)
	b = appendString(b, m.Release)
	b = appendU32(b, m.MinProtocol)
	b = appendU32(b, m.MaxProtocol)
	b = appendU32(b, m.ClusterVersion)
	return appendString(b, string(m.Leader))
}

// decodeVersionReply decodes a VersionReply's fields.
func decodeVersionReply(d *decoder) Message {
	x := &VersionReply{}
	x.Err = d.string("Err")
	x.Release = d.string("Release")
	x.MinProtocol = uint32(d.volume("MinProtocol"))
	x.MaxProtocol = uint32(d.volume("MaxProtocol"))
	x.ClusterVersion = uint32(d.volume("ClusterVersion"))
	x.Leader = NodeID(d.string("Leader"))
	return x
}

// appendRaftMessage appends a RaftMessage's fields (no type byte).
func appendRaftMessage(b []byte, m *RaftMessage) []byte {
	b = appendBytes(b, m.Data)
	return b
}

// decodeRaftMessage decodes a RaftMessage's fields.
func decodeRaftMessage(d *decoder) Message {
	return &RaftMessage{Data: d.bytes("Data")}
}

// appendKeyspaceRequest appends a KeyspaceRequest's fields (no type byte).
func appendKeyspaceRequest(b []byte, m *KeyspaceRequest) []byte {
	b = appendKeyspace(b, &m.Create)
	b = appendBool(b, m.Override != nil)
	if m.Override != nil {
		var at int
		b, at = openStruct(b)
		b = appendString(b, m.Override.Keyspace)
		b = appendBool(b, m.Override.Reassign)
		b = binary.AppendUvarint(b, m.Override.Override.Generation)
		b = appendSiteIDs(b, m.Override.Override.Sites)
		b = closeStruct(b, at)
	}
	if m.Split != "" { // appended after 0.1.0, left out when not asked
		b = appendString(b, m.Split)
	}
	return b
}

// decodeKeyspaceRequest decodes a KeyspaceRequest's fields.
func decodeKeyspaceRequest(d *decoder) Message {
	x := &KeyspaceRequest{}
	d.keyspace(&x.Create, "Create")
	if d.bool("Override") {
		x.Override = &OverrideRequest{}
		rest := d.enter("Override")
		x.Override.Keyspace = d.string("Override.Keyspace")
		x.Override.Reassign = d.bool("Override.Reassign")
		x.Override.Override.Generation = d.uvarint("Override.Generation")
		x.Override.Override.Sites = d.siteIDs("Override.Sites")
		d.leave(rest)
	}
	if len(d.b) > 0 { // appended after 0.1.0
		x.Split = d.string("Split")
	}
	return x
}

// appendKeyspaceReply appends a KeyspaceReply's fields (no type byte).
func appendKeyspaceReply(b []byte, m *KeyspaceReply) []byte {
	b = appendString(b, m.Err)
	b = appendKeyspaces(b, m.Keyspaces)
	return b
}

// decodeKeyspaceReply decodes a KeyspaceReply's fields.
func decodeKeyspaceReply(d *decoder) Message {
	x := &KeyspaceReply{}
	x.Err = d.string("Err")
	x.Keyspaces = d.keyspaces("Keyspaces")
	return x
}

// appendAuthRequest appends an AuthRequest's fields (no type byte).
func appendAuthRequest(b []byte, m *AuthRequest) []byte {
	b = binary.AppendUvarint(b, m.ID)
	b = appendAuthChange(b, &m.Change)
	return b
}

// decodeAuthRequest decodes an AuthRequest's fields.
func decodeAuthRequest(d *decoder) Message {
	x := &AuthRequest{}
	x.ID = d.uvarint("ID")
	d.authChange(&x.Change)
	return x
}

// appendAuthReply appends an AuthReply's fields (no type byte).
func appendAuthReply(b []byte, m *AuthReply) []byte {
	b = binary.AppendUvarint(b, m.ID)
	b = appendString(b, m.Err)
	b = appendAuthTable(b, &m.Table)
	return b
}

// decodeAuthReply decodes an AuthReply's fields.
func decodeAuthReply(d *decoder) Message {
	x := &AuthReply{}
	x.ID = d.uvarint("ID")
	x.Err = d.string("Err")
	d.authTable(&x.Table, "Table")
	return x
}

// appendNewAuth appends a NewAuth's fields (no type byte).
func appendNewAuth(b []byte, m *NewAuth) []byte {
	b = appendAuthTable(b, &m.Table)
	return b
}

// decodeNewAuth decodes a NewAuth's fields.
func decodeNewAuth(d *decoder) Message {
	x := &NewAuth{}
	d.authTable(&x.Table, "Table")
	return x
}
