//! Teams and their tokens, created with the admin token.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::{Admin, new_token, token_hash};
use crate::error::{ApiError, ApiJson, ApiPath, ApiResult};

#[derive(Deserialize, utoipa::ToSchema)]
pub struct NewTeam {
    /// 1-128 bytes of UTF-8 once trimmed.
    #[schema(min_length = 1, max_length = 128)]
    pub name: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TeamView {
    pub id: String,
    pub name: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TokenView {
    /// Shown once; Kiln keeps only its hash.
    pub token: String,
    pub team_id: String,
}

#[utoipa::path(post, path = "/v1/teams", request_body = NewTeam,
    responses((status = 201, body = TeamView),
              (status = 400, body = crate::error::ErrorBody, description = "not a team object, or a blank or too long name"),
              (status = 401, body = crate::error::ErrorBody),
              (status = 409, body = crate::error::ErrorBody, description = "a team of that name exists"),
              (status = 415, body = crate::error::ErrorBody, description = "not application/json"),
              (status = 503, body = crate::error::ErrorBody)),
    security(("admin_token" = [])))]
pub async fn create_team(
    State(state): State<AppState>,
    _: Admin,
    ApiJson(new): ApiJson<NewTeam>,
) -> ApiResult<(StatusCode, Json<TeamView>)> {
    let name = new.name.trim();
    if name.is_empty() || name.len() > 128 {
        return Err(ApiError::bad_request("team name must be 1-128 characters"));
    }
    let id = uuid::Uuid::now_v7().to_string();
    state.db.create_team(&id, name).await?;
    Ok((
        StatusCode::CREATED,
        Json(TeamView {
            id,
            name: name.to_string(),
        }),
    ))
}

#[utoipa::path(post, path = "/v1/teams/{id}/tokens",
    params(("id" = String, Path, description = "The team id")),
    responses((status = 201, body = TokenView), (status = 400, body = crate::error::ErrorBody),
              (status = 401, body = crate::error::ErrorBody),
              (status = 404, body = crate::error::ErrorBody), (status = 503, body = crate::error::ErrorBody)),
    security(("admin_token" = [])))]
pub async fn create_token(
    State(state): State<AppState>,
    _: Admin,
    ApiPath(team_id): ApiPath<String>,
) -> ApiResult<(StatusCode, Json<TokenView>)> {
    if !state.db.team_exists(&team_id).await? {
        return Err(ApiError::not_found(format!("team {team_id} not found")));
    }
    let token = new_token();
    state.db.create_token(&team_id, &token_hash(&token)).await?;
    Ok((StatusCode::CREATED, Json(TokenView { token, team_id })))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct TransferRequest {
    /// The team that owns the game from now on.
    pub team_id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TransferView {
    pub game: String,
    pub team_id: String,
    /// The game's live release, unchanged by the transfer (0: none yet).
    pub live_sequence: i64,
}

#[utoipa::path(post, path = "/v1/games/{game}/transfer", request_body = TransferRequest,
    description = "Gives a game to another team (admin). Its builds move with it (the new team sees and can release them, the old one no longer does); the live release stays live as it is.",
    params(("game" = String, Path, description = "The game's name")),
    responses((status = 200, body = TransferView),
              (status = 400, body = crate::error::ErrorBody),
              (status = 401, body = crate::error::ErrorBody),
              (status = 403, body = crate::error::ErrorBody),
              (status = 404, description = "No such game, or no such team", body = crate::error::ErrorBody),
              (status = 413, body = crate::error::ErrorBody),
              (status = 415, body = crate::error::ErrorBody),
              (status = 503, body = crate::error::ErrorBody)),
    security(("admin_token" = [])))]
pub async fn transfer_game(
    State(state): State<AppState>,
    _: Admin,
    ApiPath(game): ApiPath<String>,
    ApiJson(request): ApiJson<TransferRequest>,
) -> ApiResult<Json<TransferView>> {
    if state.db.game_team(&game).await?.is_none() {
        return Err(ApiError::not_found(format!("game {game} not found")));
    }
    if !state.db.team_exists(&request.team_id).await? {
        return Err(ApiError::not_found(format!(
            "team {} not found",
            request.team_id
        )));
    }
    if !state.db.transfer_game(&game, &request.team_id).await? {
        return Err(ApiError::not_found(format!("game {game} not found")));
    }
    let live_sequence = state
        .db
        .live_release(&game)
        .await?
        .map_or(0, |r| r.sequence);
    tracing::info!(%game, team_id = %request.team_id, "game transferred");
    Ok(Json(TransferView {
        game,
        team_id: request.team_id,
        live_sequence,
    }))
}
