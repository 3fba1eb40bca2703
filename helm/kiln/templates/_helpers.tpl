{{/*
Names. With a release called "kiln" (and no overrides) the Deployments are kiln-api and
kiln-worker.
*/}}
{{- define "kiln.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kiln.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 56 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kiln.apiName" -}}
{{- printf "%s-api" (include "kiln.fullname" .) }}
{{- end }}

{{- define "kiln.workerName" -}}
{{- printf "%s-worker" (include "kiln.fullname" .) }}
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

{{- define "kiln.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
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
{{- if eq $url (include "kiln.publicUrl" .) -}}
{{- fail "the content origin (content.host / config.contentUrl) must differ from the API's (api.host / config.publicUrl): team pages would run beside the dashboard" -}}
{{- end -}}
{{- $url -}}
{{- end }}

{{/*
Environment shared by kiln-api and kiln-worker: database, object store, public URL, logging.
The signing key is deliberately not here: only the worker template mounts it.
*/}}
{{- define "kiln.commonEnv" -}}
- name: KILN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "secrets.database.name is required: a Secret holding the PostgreSQL URL" .Values.secrets.database.name }}
      key: {{ .Values.secrets.database.key }}
- name: KILN_PUBLIC_URL
  value: {{ include "kiln.publicUrl" . | quote }}
- name: KILN_CONTENT_URL
  value: {{ include "kiln.contentUrl" . | quote }}
- name: KILN_S3_BUCKET
  value: {{ required "config.s3.bucket is required: the object store bucket" .Values.config.s3.bucket | quote }}
{{- with .Values.config.s3.endpoint }}
- name: KILN_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: KILN_S3_REGION
  value: {{ .Values.config.s3.region | quote }}
- name: KILN_S3_PATH_STYLE
  value: {{ .Values.config.s3.pathStyle | quote }}
{{- with .Values.secrets.aws.name }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.secrets.aws.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.secrets.aws.secretAccessKeyKey }}
{{- end }}
- name: KILN_DATA_DIR
  value: /tmp/kiln-data
- name: KILN_LOG_JSON
  value: {{ .Values.config.logJson | quote }}
{{- with .Values.config.rustLog }}
- name: RUST_LOG
  value: {{ . | quote }}
{{- end }}
{{- with .Values.config.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}
