//! The OpenAPI document served at `/v1/openapi.json`, generated from the handlers.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::routes::{
    builds, cdn, dashboard, library, ops, publishing, releases, teams, telemetry, uploads,
};

#[derive(OpenApi)]
#[openapi(
    info(title = "Kiln", description = "Upload web and mini-game builds; get them split, compressed, signed and published."),
    paths(
        uploads::upload,
        builds::status, builds::events, builds::report, builds::retry,
        publishing::manifest, publishing::keys,
        releases::create, releases::list,
        library::loader, library::loader_file, library::list, library::delete,
        telemetry::ingest,
        dashboard::page, dashboard::data,
        cdn::object, cdn::play, cdn::play_build,
        teams::create_team, teams::create_token, teams::transfer_game,
        ops::healthz, ops::readyz, ops::metrics,
    ),
    components(schemas(
        uploads::UploadResponse, builds::BuildView, builds::PackageView, publishing::Jwks,
        teams::NewTeam, teams::TeamView, teams::TokenView, teams::TransferRequest, teams::TransferView,
        releases::ReleaseRequest, releases::ReleaseView, releases::PendingRelease,
        library::LibraryView, library::LibraryEntryView, telemetry::TelemetryAccepted,
        crate::error::ErrorBody, crate::error::ErrorDetail,
    )),
    modifiers(&Security)
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "team_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
