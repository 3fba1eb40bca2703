//! The OpenAPI document served at `/v1/openapi.json`, generated from the handlers.
//!
//! The handlers' annotations list every status they answer; [`Constraints`] adds what the
//! server enforces from the code's own constants (game names, device classes, build statuses,
//! release reasons), so the document cannot drift from them.

use utoipa::openapi::content::Content;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{KnownFormat, Object, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi};

use crate::routes::{
    builds, cdn, dashboard, library, ops, publishing, releases, teams, telemetry, uploads,
};

/// What [`uploads::valid_game`] accepts, as the document's pattern (a test holds them equal).
pub const GAME_PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,63}$";

#[derive(OpenApi)]
#[openapi(
    info(title = "Kiln", description = "Upload web and mini-game builds; get them split, compressed, signed and published. Every error is `{\"error\": {\"code\", \"message\"}}` (`ErrorBody`), including malformed query strings, paths and bodies (400, 413, 415), unknown routes (404) and methods (405)."),
    paths(
        uploads::upload,
        builds::status, builds::events, builds::report, builds::retry,
        publishing::manifest, publishing::keys, publishing::trust,
        releases::create, releases::list,
        library::loader, library::loader_file, library::list, library::delete,
        telemetry::ingest, telemetry::preflight,
        dashboard::page, dashboard::css, dashboard::charts, dashboard::script,
        dashboard::login, dashboard::logout, dashboard::data,
        cdn::object, cdn::play_root, cdn::play, cdn::play_build_root, cdn::play_build,
        teams::create_team, teams::create_token, teams::transfer_game,
        ops::healthz, ops::readyz, ops::metrics, ops::openapi,
    ),
    components(schemas(
        uploads::UploadResponse, builds::BuildView, builds::PackageView, publishing::Jwks,
        teams::NewTeam, teams::TeamView, teams::TokenView, teams::TransferRequest, teams::TransferView,
        releases::ReleaseRequest, releases::ReleaseView, releases::PendingRelease,
        library::LibraryView, library::LibraryEntryView, telemetry::TelemetryAccepted,
        dashboard::LoginRequest, dashboard::LoginResponse,
        crate::error::ErrorBody, crate::error::ErrorDetail,
    )),
    modifiers(&Security, &Constraints)
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            let mut http = Http::new(HttpAuthScheme::Bearer);
            http.description = Some(description.to_string());
            SecurityScheme::Http(http)
        };
        components.add_security_scheme(
            "team_token",
            bearer("A team's token (`kiln_…`, from `POST /v1/teams/{id}/tokens`)"),
        );
        components.add_security_scheme(
            "admin_token",
            bearer("The operator's token (`KILN_ADMIN_TOKEN`)"),
        );
    }
}

struct Constraints;

impl Modify for Constraints {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        // `/dashboard/` serves the same page as `/dashboard`.
        if let Some(item) = openapi.paths.paths.get("/dashboard").cloned() {
            let mut item = item;
            if let Some(get) = item.get.as_mut() {
                get.operation_id = Some("page_slash".into());
            }
            openapi.paths.paths.insert("/dashboard/".into(), item);
        }
        // A package is bytes, of either format.
        if let Some(body) = openapi
            .paths
            .paths
            .get_mut("/v1/games/{game}/builds")
            .and_then(|item| item.post.as_mut())
            .and_then(|op| op.request_body.as_mut())
            && let RefOr::T(body) = body
        {
            let binary = ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
                .build();
            body.content = ["application/zip", "application/gzip"]
                .into_iter()
                .map(|t| (t.to_string(), Content::new(Some(binary.clone())).into()))
                .collect();
        }
        let classes = kiln_common::devices::CLASSES;
        // Every route runs under a timeout layer (lib.rs): any of them can answer its 503.
        let timeout = ResponseBuilder::new()
            .description(
                "Took longer than `KILN_REQUEST_TIMEOUT_SECS` (uploads and event streams: `KILN_UPLOAD_TIMEOUT_SECS`); the error code is `timeout`",
            )
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name("ErrorBody"))),
            )
            .build();
        // Game content is served by the content origin only (`KILN_CONTENT_URL`); the API
        // origin answers these paths with a redirect there (lib.rs `router`).
        let to_content = ResponseBuilder::new()
            .description(
                "On the API origin: `308` to the same path on the content origin (`KILN_CONTENT_URL`), which serves it",
            )
            .header(
                "location",
                utoipa::openapi::HeaderBuilder::new()
                    .schema(Some(Object::with_type(Type::String)))
                    .build(),
            )
            .build();
        for (path, item) in openapi.paths.paths.iter_mut() {
            let content = ["/play/", "/cdn/", "/sdk/"]
                .iter()
                .any(|prefix| path.starts_with(prefix));
            for op in operations(item) {
                op.responses
                    .responses
                    .entry("503".into())
                    .or_insert_with(|| timeout.clone().into());
                if content {
                    op.responses
                        .responses
                        .entry("308".into())
                        .or_insert_with(|| to_content.clone().into());
                }
                for param in op.parameters.iter_mut().flatten() {
                    let RefOr::T(param) = param else { continue };
                    let Some(RefOr::T(Schema::Object(schema))) = param.schema.as_mut() else {
                        continue;
                    };
                    match (param.name.as_str(), &param.parameter_in) {
                        ("game", ParameterIn::Path) => {
                            schema.pattern = Some(GAME_PATTERN.into());
                            schema.min_length = Some(1);
                            schema.max_length = Some(64);
                        }
                        ("device", ParameterIn::Query) => set_enum(schema, classes),
                        _ => {}
                    }
                }
            }
        }
        let statuses: Vec<&str> = kiln_common::db::BuildStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        let reasons =
            kiln_common::db::ReleaseReason::ALL.map(kiln_common::db::ReleaseReason::as_str);
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for (schema, property, values) in [
            ("BuildView", "status", &statuses[..]),
            ("UploadResponse", "status", &statuses[..]),
            ("ReleaseView", "reason", &reasons[..]),
        ] {
            if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema)
                && let Some(RefOr::T(Schema::Object(field))) = object.properties.get_mut(property)
            {
                set_enum(field, values);
            }
        }
    }
}

fn set_enum(schema: &mut Object, values: &[&str]) {
    schema.enum_values = Some(values.iter().map(|v| (*v).into()).collect());
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.options.as_mut(),
        item.head.as_mut(),
        item.patch.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}
