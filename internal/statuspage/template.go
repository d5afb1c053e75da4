package statuspage

import "html/template"

// pageTemplate renders a view. Plain HTML and CSS, no script: the page
// reloads itself with a meta refresh.
var pageTemplate = template.Must(template.New("status").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{{if .RefreshSeconds}}<meta http-equiv="refresh" content="{{.RefreshSeconds}}">{{end}}
<title>Catena status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #1d2430; background: #fafbfc; }
h1 { font-size: 1.5em; margin: 0 0 .2em; }
h2 { font-size: 1.1em; margin: 1.6em 0 .5em; }
.meta { color: #5b6573; }
table { border-collapse: collapse; background: #fff; box-shadow: 0 0 0 1px #dde1e6; }
th, td { padding: .3em .8em; text-align: left; border-bottom: 1px solid #e6e9ed; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.replica { display: inline-block; margin: 0 .3em .2em 0; padding: .1em .5em; border-radius: 4px; border: 1px solid #cfd5dc; white-space: nowrap; }
.ok { background: #e7f6ec; border-color: #9fd5b0; }
.warn { background: #fff6dd; border-color: #e8cf7d; }
.bad { background: #fde8e8; border-color: #ea9f9f; }
.role { font-weight: 600; }
.big { font-size: 1.6em; font-weight: 600; }
.error { padding: 1em; background: #fde8e8; border: 1px solid #ea9f9f; }
</style>
</head>
<body>
<h1>Catena cluster</h1>
<div class="meta">served by master member {{.Self}} · {{.Generated}}{{if .RefreshSeconds}} · refreshes every {{.RefreshSeconds}} s{{end}} · <a href="/status.json">status.json</a> · <a href="/metrics">metrics</a></div>
{{if .Error}}
<p class="error">No status from the master: {{.Error}}</p>
{{else}}
<h2>Masters</h2>
<table id="masters">
<tr><th>member</th><th>role</th></tr>
{{range .Masters}}<tr><td>{{.Addr}}{{if .Self}} (this page){{end}}</td><td>{{if .Leader}}<span class="replica ok role">leader</span>{{else}}follower{{end}}</td></tr>
{{end}}</table>
{{if not .Leader}}<p class="warn">No leader answered: this is a member's view, which may be out of date.</p>{{end}}
<p class="meta">cluster protocol version <span id="cluster-version">{{.ClusterVersion}}</span> (catena upgrade status)</p>

{{if .Sites}}<h2>Sites</h2>
<table id="sites">
<tr><th>site</th><th>name</th><th>masters</th></tr>
{{range .Sites}}<tr><td class="num">{{.ID}}</td><td>{{.Name}}{{if .Self}} (this site){{end}}</td><td>{{.Masters}}</td></tr>
{{end}}</table>
<h2>Shipping to other sites</h2>
<table id="shipping">
<tr><th>volume</th><th>to site</th><th>originated here</th><th>stable there</th><th>lag</th><th>oldest unshipped (s)</th></tr>
{{range .Shipping}}<tr><td class="num">{{.Volume}}</td><td class="num">{{.To}}</td><td class="num">{{.Originated}}</td><td class="num">{{.Shipped}}</td><td class="num">{{.Lag}}</td><td class="num">{{printf "%.3f" .AgeSeconds}}</td></tr>
{{end}}</table>
{{if .ShippingHidden}}<p class="meta">{{.ShippingHidden}} more (catena status -json lists them all)</p>{{end}}
{{if .Control}}<h2>Control of hierarchical keys</h2>
<table id="control">
<tr><th>key or prefix</th><th>keyspace</th><th>controlled by site</th><th>scope</th></tr>
{{range .Control}}<tr><td>{{.Path}}</td><td>{{.Keyspace}}</td><td>{{.Site}}</td><td>{{.Scope}}</td></tr>
{{end}}</table>
{{if .ControlHidden}}<p class="meta">{{.ControlHidden}} more (catena status -json lists them all)</p>{{end}}
{{end}}
{{end}}
<h2>Throughput</h2>
<p><span class="big" id="throughput">{{if .Throughput}}{{.Throughput}}{{else}}…{{end}}</span> committed updates/s
<span class="meta">{{if not .Throughput}}(measuring: shown from the next refresh){{else}}(over the last 10 s, from the volumes' committed sequence numbers){{end}}</span></p>

<h2>Keyspaces</h2>
<table id="keyspaces">
<tr><th>keyspace</th><th>prefix</th><th>mode</th><th>replicas</th><th>volumes</th></tr>
{{range .Keyspaces}}<tr><td>{{.Name}}</td><td>{{if .Prefix}}<code>{{.Prefix}}</code>{{else}}(every other key){{end}}</td><td>{{.Mode}}</td><td class="num">{{.Replicas}}</td><td>{{.Volumes}}</td></tr>
{{end}}</table>

<h2>Servers</h2>
<table id="servers">
<tr><th>server</th><th>health</th><th>incarnation</th><th>protocol</th><th>head</th><th>middle</th><th>tail</th><th>head+tail</th><th>joining</th></tr>
{{range .Servers}}<tr><td>{{.Addr}}</td><td>{{if .Alive}}<span class="replica ok">alive</span>{{else}}<span class="replica bad">down</span>{{end}}</td><td class="num">{{.Incarnation}}</td><td class="num">{{.Protocol}}</td><td class="num">{{.Heads}}</td><td class="num">{{.Middles}}</td><td class="num">{{.Tails}}</td><td class="num">{{.Sole}}</td><td class="num">{{.Joining}}</td></tr>
{{end}}</table>

<h2>Volumes and chains</h2>
<table id="volumes">
<tr><th>volume</th><th>keyspace</th><th>epoch</th><th>updates/s</th><th>watches</th><th>chain, head to tail: server · role · epoch · applied · lag · watches · health</th></tr>
{{range .Volumes}}<tr><td class="num">{{.Volume}}</td><td>{{.Keyspace}}</td><td class="num">{{.Epoch}}</td><td class="num">{{if .Rate}}{{.Rate}}{{else}}…{{end}}</td><td class="num">{{.Watches}}</td><td>
{{range .Replicas}}<span class="replica {{.Class}}" data-server="{{.Addr}}" data-role="{{.Role}}">{{.Addr}} · <span class="role">{{.Role}}</span>{{if .Reported}} · e{{.Epoch}} · applied {{.Applied}} · lag {{.Lag}}{{if .Watches}} · watches {{.Watches}}{{end}}{{end}} · {{.Health}}</span>
{{end}}</td></tr>
{{end}}</table>
{{if .VolumesHidden}}<p class="meta">… and {{.VolumesHidden}} more volumes (see status.json).</p>{{end}}
{{end}}

<h2>Recent reconfigurations</h2>
{{if .Reconfigurations}}<table id="reconfigurations">
<tr><th>when</th><th>volume</th><th>epoch</th><th>kind</th><th>chain</th><th>joining</th><th>removed</th></tr>
{{range .Reconfigurations}}<tr><td>{{.Ago}}</td><td class="num">{{.Volume}}</td><td class="num">{{.Epoch}}</td><td>{{.Kind}}</td><td>{{.Chain}}</td><td>{{.Joining}}</td><td>{{.Removed}}</td></tr>
{{end}}</table>
<p class="meta">As this member applied them since it started (at most 64 kept).</p>
{{else}}<p class="meta">None since this member started.</p>{{end}}
</body>
</html>
`))
