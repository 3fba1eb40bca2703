{{/*
Names. With a release called "kiln" (and no overrides) the Deployments are kiln-api and
kiln-worker.
*/}}
{{- define "kiln.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kiln.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kiln.apiName" -}}
{{- printf "%s-api" (include "kiln.fullname" .) }}
{{- end }}

{{- define "kiln.workerName" -}}
{{- printf "%s-worker" (include "kiln.fullname" .) }}
{{- end }}

{{- define "kiln.metricsName" -}}
{{- printf "%s-metrics" (include "kiln.fullname" .) }}
{{- end }}

{{- define "kiln.migrateName" -}}
{{- printf "%s-migrate" (include "kiln.fullname" .) }}
{{- end }}

{{- define "kiln.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kiln.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kiln.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The migration Job's ServiceAccount. It runs before the release's other resources exist
(pre-install), so it cannot use the runtime ServiceAccount the chart creates: either its own
hook ServiceAccount (migration.serviceAccount.create) or an existing one.
*/}}
{{- define "kiln.migrateServiceAccountName" -}}
{{- if .Values.migration.serviceAccount.create }}
{{- default (include "kiln.migrateName" .) .Values.migration.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.migration.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kiln.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Labels on every resource; the component label is added by each template. */}}
{{- define "kiln.labels" -}}
helm.sh/chart: {{ include "kiln.chart" . }}
{{ include "kiln.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kiln
{{- end }}

{{- define "kiln.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kiln.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The API origin's URL: config.publicUrl, else https://{api.host}.
*/}}
{{- define "kiln.publicUrl" -}}
{{- if .Values.config.publicUrl -}}
{{- .Values.config.publicUrl -}}
{{- else -}}
{{- printf "https://%s" (required "api.host (or config.publicUrl) is required: the API's host name" .Values.api.host) -}}
{{- end -}}
{{- end }}

{{/*
The content origin's URL: config.contentUrl, else https://{content.host}. Never the API's.
*/}}
{{- define "kiln.contentUrl" -}}
{{- $url := .Values.config.contentUrl -}}
{{- if not $url -}}
{{- $url = printf "https://%s" (required "content.host (or config.contentUrl) is required: the content origin's host name, apart from the API's" .Values.content.host) -}}
{{- end -}}
{{- if eq (trimSuffix "/" $url) (trimSuffix "/" (include "kiln.publicUrl" .)) -}}
{{- fail "the content origin (content.host / config.contentUrl) must differ from the API's (api.host / config.publicUrl): team pages would run beside the dashboard" -}}
{{- end -}}
{{- $url -}}
{{- end }}

{{/*
An environment variable's value as the binaries parse it. Helm reads every YAML number as a
float, so whole numbers are written as digits (4294967296, never 4.294967296e+09).
*/}}
{{- define "kiln.envValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . | toString -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end }}

{{/*
Optional settings, as a JSON list of EnvVar objects: a value is rendered only when it is set
(not null), so an unset value leaves the binaries' own default. Call with a list of
(list "KILN_NAME" .Values.some.value) pairs.
*/}}
{{- define "kiln.optionalEnv" -}}
{{- $out := list -}}
{{- range . -}}
{{- $value := index . 1 -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $out = append $out (dict "name" (index . 0) "value" (include "kiln.envValue" $value)) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* A map of settings by variable name (config.env, api.env, worker.env) as a JSON list, sorted by name. */}}
{{- define "kiln.envMap" -}}
{{- $out := list -}}
{{- range $name, $value := . -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $out = append $out (dict "name" $name "value" (include "kiln.envValue" $value)) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/*
The client-address header for telemetry rate limits: config.telemetryClientIpHeader when it
is a string ("" means never set), else X-Forwarded-For when the Ingress is on, else unset
(the peer address: right when nothing proxies).
*/}}
{{- define "kiln.clientIpHeader" -}}
{{- $h := .Values.config.telemetryClientIpHeader -}}
{{- if kindIs "string" $h -}}
{{- $h -}}
{{- else if .Values.ingress.enabled -}}
X-Forwarded-For
{{- end -}}
{{- end }}

{{- define "kiln.secretEnv" -}}
{{- dict "name" (index . 0) "valueFrom" (dict "secretKeyRef" (dict "name" (index . 1) "key" (index . 2))) | toJson -}}
{{- end }}

{{/*
Environment shared by kiln-api and kiln-worker (a JSON list): database, object store, public
URLs, logging. The signing key is deliberately not here: only the worker template mounts it.
*/}}
{{- define "kiln.commonEnv" -}}
{{- $v := .Values -}}
{{- $env := list (include "kiln.secretEnv" (list "KILN_DATABASE_URL" (required "secrets.database.name is required: a Secret holding the PostgreSQL URL" $v.secrets.database.name) $v.secrets.database.key) | fromJson) -}}
{{- if $v.migration.enabled -}}
{{- /* The migration Job (a pre-install/pre-upgrade hook) changes the schema; these pods do not. */ -}}
{{- $env = append $env (dict "name" "KILN_MIGRATE_ON_START" "value" "false") -}}
{{- end -}}
{{- $env = append $env (dict "name" "KILN_PUBLIC_URL" "value" (include "kiln.publicUrl" .)) -}}
{{- $env = append $env (dict "name" "KILN_CONTENT_URL" "value" (include "kiln.contentUrl" .)) -}}
{{- $env = append $env (dict "name" "KILN_S3_BUCKET" "value" (required "config.s3.bucket is required: the object store bucket" $v.config.s3.bucket)) -}}
{{- with $v.config.s3.endpoint -}}
{{- $env = append $env (dict "name" "KILN_S3_ENDPOINT" "value" .) -}}
{{- end -}}
{{- $env = concat $env (include "kiln.optionalEnv" (list (list "KILN_S3_REGION" $v.config.s3.region) (list "KILN_S3_PATH_STYLE" $v.config.s3.pathStyle)) | fromJsonArray) -}}
{{- with $v.secrets.aws.name -}}
{{- $env = append $env (include "kiln.secretEnv" (list "AWS_ACCESS_KEY_ID" . $v.secrets.aws.accessKeyIdKey) | fromJson) -}}
{{- $env = append $env (include "kiln.secretEnv" (list "AWS_SECRET_ACCESS_KEY" . $v.secrets.aws.secretAccessKeyKey) | fromJson) -}}
{{- end -}}
{{- /* The root filesystem is read-only: what a process writes goes to the /tmp emptyDir. */ -}}
{{- $env = append $env (dict "name" "KILN_DATA_DIR" "value" "/tmp/kiln-data") -}}
{{- $env = concat $env (include "kiln.optionalEnv" (list (list "KILN_LOG_JSON" $v.config.logJson)) | fromJsonArray) -}}
{{- with $v.config.rustLog -}}
{{- $env = append $env (dict "name" "RUST_LOG" "value" .) -}}
{{- end -}}
{{- $env = concat $env (include "kiln.envMap" $v.config.env | fromJsonArray) -}}
{{- toJson $env -}}
{{- end }}

{{/* kiln-api's environment (a JSON list). */}}
{{- define "kiln.apiEnv" -}}
{{- $v := .Values -}}
{{- $env := list -}}
{{- $env = append $env (dict "name" "KILN_BIND" "value" (printf "0.0.0.0:%v" $v.api.port)) -}}
{{- $env = append $env (dict "name" "KILN_CONTENT_BIND" "value" (printf "0.0.0.0:%v" $v.content.port)) -}}
{{- $env = append $env (dict "name" "KILN_METRICS_BIND" "value" (printf "0.0.0.0:%v" $v.api.metricsPort)) -}}
{{- $env = append $env (dict "name" "KILN_WORKERS" "value" "0") -}}
{{- $env = append $env (dict "name" "KILN_DB_MAX_CONNECTIONS" "value" (include "kiln.envValue" $v.api.dbMaxConnections)) -}}
{{- with $v.secrets.admin.name -}}
{{- $env = append $env (include "kiln.secretEnv" (list "KILN_ADMIN_TOKEN" . $v.secrets.admin.key) | fromJson) -}}
{{- end -}}
{{- $env = append $env (dict "name" "KILN_TELEMETRY_SECRET_FILE" "value" (printf "%s/telemetry.key" ($v.secrets.telemetry.mountPath | trimSuffix "/"))) -}}
{{- with include "kiln.clientIpHeader" . -}}
{{- $env = append $env (dict "name" "KILN_TELEMETRY_CLIENT_IP_HEADER" "value" .) -}}
{{- end -}}
{{- $env = concat $env (include "kiln.optionalEnv" (list (list "KILN_TELEMETRY_ACK" $v.api.telemetryAck) (list "KILN_UPLOAD_MAX_BYTES" $v.api.uploadMaxBytes) (list "KILN_UPLOAD_MAX_CONCURRENT" $v.api.uploadMaxConcurrent) (list "KILN_UPLOAD_TIMEOUT_SECS" $v.api.uploadTimeoutSecs) (list "KILN_REQUEST_TIMEOUT_SECS" $v.api.requestTimeoutSecs)) | fromJsonArray) -}}
{{- $env = concat $env (include "kiln.commonEnv" . | fromJsonArray) (include "kiln.envMap" $v.api.env | fromJsonArray) $v.config.extraEnv $v.api.extraEnv -}}
{{- toJson $env -}}
{{- end }}

{{/*
kiln-worker's environment (a JSON list). KILN_ROOT_KEY_FILE names a file that is not there
unless secrets.rootKey is set: with no trust document yet, a worker then refuses to start
(run `kiln-worker keys init` where the root key is) instead of minting a throwaway root key
in its emptyDir that nobody could ever rotate with.
*/}}
{{- define "kiln.workerEnv" -}}
{{- $v := .Values -}}
{{- $env := list -}}
{{- $env = append $env (dict "name" "KILN_WORKER_METRICS_BIND" "value" (printf "0.0.0.0:%v" $v.worker.metricsPort)) -}}
{{- $env = append $env (dict "name" "KILN_DB_MAX_CONNECTIONS" "value" (include "kiln.envValue" $v.worker.dbMaxConnections)) -}}
{{- $env = append $env (dict "name" "KILN_SIGNING_KEY_FILE" "value" (printf "%s/signing.key" ($v.secrets.signingKey.mountPath | trimSuffix "/"))) -}}
{{- $env = append $env (dict "name" "KILN_ROOT_KEY_FILE" "value" (printf "%s/root.key" ($v.secrets.rootKey.mountPath | trimSuffix "/"))) -}}
{{- $env = append $env (dict "name" "KILN_TELEMETRY_SECRET_FILE" "value" (printf "%s/telemetry.key" ($v.secrets.telemetry.mountPath | trimSuffix "/"))) -}}
{{- $env = append $env (dict "name" "KILN_WORK_DIR" "value" $v.worker.workDir) -}}
{{- $env = concat $env (include "kiln.optionalEnv" (list (list "KILN_WORKER_CONCURRENCY" $v.worker.concurrency) (list "KILN_WORKER_HEARTBEAT_SECS" $v.worker.heartbeatSecs) (list "KILN_WORKER_ORPHAN_SECS" $v.worker.orphanSecs) (list "KILN_WORKER_TRANSIENT_RETRIES" $v.worker.transientRetries) (list "KILN_UNPACK_MAX_ENTRIES" $v.worker.unpackMaxEntries) (list "KILN_UNPACK_MAX_BYTES" $v.worker.unpackMaxBytes) (list "KILN_UNPACK_MAX_RATIO" $v.worker.unpackMaxRatio)) | fromJsonArray) -}}
{{- $env = concat $env (include "kiln.commonEnv" . | fromJsonArray) (include "kiln.envMap" $v.worker.env | fromJsonArray) $v.config.extraEnv $v.worker.extraEnv -}}
{{- toJson $env -}}
{{- end }}

{{/*
Names the chart sets itself; config.env, api.env and worker.env may not name them (a second
entry with the same name would silently win or lose).
*/}}
{{- define "kiln.managedEnv" -}}
{{- list "KILN_DATABASE_URL" "KILN_MIGRATE_ON_START" "KILN_PUBLIC_URL" "KILN_CONTENT_URL" "KILN_S3_BUCKET" "KILN_S3_ENDPOINT" "KILN_S3_REGION" "KILN_S3_PATH_STYLE" "KILN_DATA_DIR" "KILN_LOG_JSON" "RUST_LOG" "KILN_BIND" "KILN_CONTENT_BIND" "KILN_METRICS_BIND" "KILN_WORKERS" "KILN_DB_MAX_CONNECTIONS" "KILN_ADMIN_TOKEN" "KILN_TELEMETRY_SECRET_FILE" "KILN_TELEMETRY_CLIENT_IP_HEADER" "KILN_UPLOAD_MAX_BYTES" "KILN_UPLOAD_MAX_CONCURRENT" "KILN_UPLOAD_TIMEOUT_SECS" "KILN_REQUEST_TIMEOUT_SECS" "KILN_WORKER_METRICS_BIND" "KILN_SIGNING_KEY_FILE" "KILN_ROOT_KEY_FILE" "KILN_WORK_DIR" "KILN_WORKER_CONCURRENCY" "KILN_WORKER_HEARTBEAT_SECS" "KILN_WORKER_ORPHAN_SECS" "KILN_TELEMETRY_ACK" "KILN_WORKER_TRANSIENT_RETRIES" "KILN_UNPACK_MAX_ENTRIES" "KILN_UNPACK_MAX_BYTES" "KILN_UNPACK_MAX_RATIO" "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" | toJson }}
{{- end }}

{{/* Pods a Deployment may run at once during a rollout: N plus its maxSurge. */}}
{{- define "kiln.surge" -}}
{{- $pods := int .pods -}}
{{- $strategy := .strategy | default (dict) -}}
{{- if eq (toString ($strategy.type | default "RollingUpdate")) "Recreate" -}}
0
{{- else -}}
{{- $rolling := $strategy.rollingUpdate | default (dict) -}}
{{- $surge := "25%" -}}
{{- if hasKey $rolling "maxSurge" }}{{ $surge = $rolling.maxSurge }}{{ end -}}
{{- if kindIs "string" $surge -}}
{{- if hasSuffix "%" $surge -}}
{{- $pct := trimSuffix "%" $surge | int -}}
{{- div (add (mul $pods $pct) 99) 100 -}}
{{- else -}}
{{- $surge | int -}}
{{- end -}}
{{- else -}}
{{- int $surge -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The database connection budget, as JSON. Each process holds at most KILN_DB_MAX_CONNECTIONS
(api.dbMaxConnections, worker.dbMaxConnections: all its pools together). The most pods that
can run at once: the HPA's / KEDA's maxReplicas when autoscaling, else replicas, plus each
Deployment's maxSurge during a rollout; the migration Job runs before a rollout starts (a
pre-upgrade hook), so it counts instead of the surge when it is larger; KEDA's PostgreSQL
scaler holds one more.
*/}}
{{- define "kiln.connectionBudget" -}}
{{- $api := .Values.api -}}
{{- $worker := .Values.worker -}}
{{- $apiPods := int $api.replicas -}}
{{- if $api.autoscaling.enabled }}{{ $apiPods = int $api.autoscaling.maxReplicas }}{{ end -}}
{{- $workerPods := int $worker.replicas -}}
{{- if $worker.keda.enabled }}{{ $workerPods = int $worker.keda.maxReplicas }}{{ end -}}
{{- $apiSurge := include "kiln.surge" (dict "pods" $apiPods "strategy" $api.strategy) | int -}}
{{- $workerSurge := include "kiln.surge" (dict "pods" $workerPods "strategy" $worker.strategy) | int -}}
{{- $apiPool := int $api.dbMaxConnections -}}
{{- $workerPool := int $worker.dbMaxConnections -}}
{{- $steady := add (mul $apiPods $apiPool) (mul $workerPods $workerPool) -}}
{{- $surge := add (mul $apiSurge $apiPool) (mul $workerSurge $workerPool) -}}
{{- $migration := 0 -}}
{{- if .Values.migration.enabled }}{{ $migration = int .Values.migration.dbMaxConnections }}{{ end -}}
{{- $keda := 0 -}}
{{- if $worker.keda.enabled }}{{ $keda = 1 }}{{ end -}}
{{- $total := add $steady (max $surge $migration) $keda -}}
{{- $available := sub (int .Values.database.maxConnections) (int .Values.database.reservedConnections) -}}
{{- dict "apiPods" $apiPods "apiSurge" $apiSurge "apiPool" $apiPool "workerPods" $workerPods "workerSurge" $workerSurge "workerPool" $workerPool "steady" $steady "surge" $surge "migration" $migration "keda" $keda "total" $total "available" $available | toJson -}}
{{- end }}

{{- define "kiln.connectionBudgetText" -}}
{{- $b := include "kiln.connectionBudget" . | fromJson -}}
{{- printf "%v API pods x %v + %v worker pods x %v = %v steady; + max(rollout surge %v API x %v + %v worker x %v = %v, migration Job %v) + KEDA scaler %v = %v of %v available (database.maxConnections %v - database.reservedConnections %v)" $b.apiPods $b.apiPool $b.workerPods $b.workerPool $b.steady $b.apiSurge $b.apiPool $b.workerSurge $b.workerPool $b.surge $b.migration $b.keda $b.total $b.available .Values.database.maxConnections .Values.database.reservedConnections -}}
{{- end }}

{{/* Checks that span several values; templates/validate.yaml runs them. */}}
{{- define "kiln.validate" -}}
{{- $b := include "kiln.connectionBudget" . | fromJson -}}
{{- if and .Values.database.enforceBudget (gt (int $b.total) (int $b.available)) -}}
{{- fail (printf "database connection budget exceeded: %s. Lower replicas, autoscaling maxReplicas or dbMaxConnections, or raise database.maxConnections to what PostgreSQL (or the pooler in front of it) allows; database.enforceBudget=false turns this check into a warning in the release notes." (include "kiln.connectionBudgetText" .)) -}}
{{- end -}}
{{- if and .Values.api.autoscaling.enabled (gt (int .Values.api.autoscaling.minReplicas) (int .Values.api.autoscaling.maxReplicas)) -}}
{{- fail "api.autoscaling.minReplicas is above api.autoscaling.maxReplicas" -}}
{{- end -}}
{{- if and .Values.api.autoscaling.enabled (not (dig "requests" "cpu" "" .Values.api.resources)) -}}
{{- fail "api.autoscaling scales on CPU utilisation, a share of the CPU request: set api.resources.requests.cpu" -}}
{{- end -}}
{{- if and .Values.worker.keda.enabled (gt (int .Values.worker.keda.minReplicas) (int .Values.worker.keda.maxReplicas)) -}}
{{- fail "worker.keda.minReplicas is above worker.keda.maxReplicas" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled -}}
{{- fail "metrics.serviceMonitor and metrics.podMonitor are both enabled: every pod would be scraped twice; pick one" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled .Values.networkPolicy.egress.enabled (not .Values.networkPolicy.egress.to) -}}
{{- fail "networkPolicy.egress.enabled needs networkPolicy.egress.to: rules that reach PostgreSQL and the object store (the pods cannot work without them)" -}}
{{- end -}}
{{- $managed := include "kiln.managedEnv" . | fromJsonArray -}}
{{- range $where, $env := dict "config.env" .Values.config.env "api.env" .Values.api.env "worker.env" .Values.worker.env -}}
{{- range $name, $_ := $env -}}
{{- if has $name $managed -}}
{{- fail (printf "%s.%s: the chart sets %s itself; use the chart's value for it (see README.md)" $where $name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The pod-level security context, shared by every pod of the chart. */}}
{{- define "kiln.podSecurityContext" -}}
{{- with .Values.podSecurityContext -}}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "kiln.containerSecurityContext" -}}
{{- with .Values.containerSecurityContext -}}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
