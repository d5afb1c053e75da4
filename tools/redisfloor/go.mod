module github.com/catena-kv/catena/tools/redisfloor

go 1.26

require (
	github.com/panjf2000/gnet/v2 v2.9.7
	github.com/tidwall/redcon v1.6.4
)

require (
	github.com/panjf2000/ants/v2 v2.11.3 // indirect
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
