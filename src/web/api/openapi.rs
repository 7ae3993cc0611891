//! `GET /api/v1/openapi.json`: the OpenAPI 3.1 document of every `/api/v1` route, generated
//! from the code.
//!
//! Owns assembling and serving the document. Its paths, parameters, bodies and per-route
//! statuses come from the handlers' `#[utoipa::path]` attributes and the `ToSchema` derives of
//! their request and response types, collected by utoipa-axum's router while the routes are
//! registered (`web::api::routes`), so the document cannot list a route the router
//! lacks or miss one it has. `with_common_responses` then adds the answers that come from
//! the layers and extractors rather than from a handler: 401 and 403 (`auth.rs`), 500, 503
//! (the request timeout), and for a route with a JSON body the extractor's 400, 413, 415 and
//! 422, for a route with a path parameter 400 (not UTF-8) and 404. This module never decides a
//! request's status itself.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, RefOr, Required, ResponseBuilder, Type};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::web::error::Problem;
use crate::web::AppState;

/// The document's fixed parts: title, description, tags, the problem schema.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Baton API",
        version = "1",
        description = "The REST API of `baton serve`: executions, projects, specs and the board. \
            Once users exist, every route here needs a credential (`Authorization: Bearer <token>` \
            or a session cookie) and a role; with no users the server runs open on loopback and \
            `X-Baton-Actor` names who acts (the empty security requirement). Every error is a \
            problem body `{error, message, details}` (the `Error` schema). Any request may also \
            end in 503 (`unavailable`) when it exceeds the 30 s request timeout, and a method a \
            path does not serve is 405 (`method_not_allowed`). This document is generated from \
            the handlers (utoipa)."
    ),
    components(schemas(Problem, crate::model::spec::SpecStatus)),
    tags(
        (name = "executions", description = "Executions: state, journal, next action, and the driver's and reviewers' recording routes."),
        (name = "projects", description = "Registered projects."),
        (name = "specs", description = "Specs through their lifecycle: write, enrich, review, fire."),
        (name = "board", description = "The PMO board."),
        (name = "metrics", description = "Portfolio figures: what the metrics page plots."),
        (name = "stream", description = "Server-Sent Events."),
        (name = "meta", description = "This document.")
    )
)]
struct ApiDoc;

/// The document's own route.
pub(crate) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(document))
}

/// The generated document (built once).
pub fn openapi() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        doc.merge(crate::web::api::routes().into_openapi());
        with_common_responses(&mut doc);
        doc
    })
}

/// The generated document as JSON text, as served.
pub fn openapi_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let json = openapi().to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        plain_code_links(&json)
    })
}

/// `text` with rustdoc's intra-doc links (`` [`Name`] ``, which the descriptions inherit from
/// the doc comments) written as plain code (`` `Name` ``): outside rustdoc they are no links.
/// A markdown link with an address (`` [`x`](url) ``) is kept.
fn plain_code_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("[`") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.find("`]") {
            Some(end) if !after[..end + 1].contains(['[', ']', '\n']) && !after[end + 2..].starts_with('(') => {
                out.push_str(&after[..end + 1]);
                rest = &after[end + 2..];
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The OpenAPI 3.1 document of every `/api/v1` route.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "meta",
    operation_id = "openapi",
    responses((status = 200, description = "This document.", content_type = "application/json", body = Object))
)]
async fn document() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], openapi_json())
}

/// The shared error answers: name, status, description.
const COMMON: &[(&str, &str, &str)] = &[
    (
        "BadRequest",
        "400",
        "A malformed request: a query parameter out of its schema or not one the operation declares \
         (`details.field` names it), a bad header, a path that is not UTF-8, a body that is not JSON \
         or did not arrive within 10 s (`error`: `bad_request` or `invalid_body`).",
    ),
    ("Unauthorized", "401", "Users exist and the request carries no valid credential (`error`: `unauthorized`)."),
    (
        "Forbidden",
        "403",
        "The caller's role is too low for the route, a browser request came from another site, or \
         (approvals) the caller fired the execution of a project that requires a separate reviewer \
         (`error`: `forbidden`).",
    ),
    ("NotFound", "404", "No such execution, project or spec (`error`: `not_found`)."),
    (
        "Conflict",
        "409",
        "The current state refuses the request (`error`: `conflict`; `details.reason` or \
         `details.current_status`), or another process holds the execution's lease.",
    ),
    ("PayloadTooLarge", "413", "The body is over the size limit (`error`: `invalid_body`)."),
    ("UnsupportedMediaType", "415", "The body is not sent as `application/json` (`error`: `invalid_body`)."),
    (
        "Unprocessable",
        "422",
        "Well-formed but wrong: a missing or mistyped field, an unknown field, a body that is not a \
         JSON object, or a step, phase or question the plan lacks (`error`: `invalid_body` or \
         `unprocessable`; `details.field` when one field is at fault).",
    ),
    (
        "BadGateway",
        "502",
        "The forge failed, refused the operation or Baton's credentials, or pushing the branch failed \
         (`error`: `forge_unavailable`, `forge_refused`, `forge_bad_credentials`, `push_failed`).",
    ),
    ("Internal", "500", "The server's own failure (`error`: `internal`); the cause is logged, never returned."),
    (
        "Unavailable",
        "503",
        "The database does not answer or the request took longer than the 30 s request timeout \
         (`error`: `unavailable`).",
    ),
];

/// The shared answer `name` of [`COMMON`], with a [`Problem`] body.
fn common_response(name: &str) -> utoipa::openapi::Response {
    let description = COMMON.iter().find(|(n, _, _)| *n == name).map_or("", |(_, _, d)| *d);
    let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build();
    ResponseBuilder::new().description(description).content("application/json", content).build()
}

macro_rules! common_responses {
    ($($ty:ident),* $(,)?) => { $(
        #[doc = concat!("The shared `", stringify!($ty), "` answer (a problem body), for a handler's `responses(...)`.")]
        #[derive(Debug)]
        pub struct $ty;
        impl<'s> utoipa::ToResponse<'s> for $ty {
            fn response() -> (&'s str, RefOr<utoipa::openapi::Response>) {
                (stringify!($ty), RefOr::T(common_response(stringify!($ty))))
            }
        }
    )* };
}

common_responses!(BadRequest, NotFound, Conflict, Unprocessable, BadGateway, Unavailable);

/// Adds the answers the layers and extractors give (see the module doc), the security
/// schemes and requirements, and the `X-Baton-Actor` header of every write.
fn with_common_responses(doc: &mut utoipa::openapi::OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, _, _) in COMMON {
        components.responses.insert((*name).to_string(), RefOr::T(common_response(name)));
    }
    components.add_security_scheme(
        "bearerToken",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An API token from `baton token create` (roles: viewer reads; reviewer decides \
                     approvals, feedback and interactive steps; lead does every other write; admin \
                     manages projects).",
                ))
                .build(),
        ),
    );
    components.add_security_scheme(
        "session",
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            "baton_session",
            "The signed session cookie of a browser signed in at `/login`.",
        ))),
    );
    doc.security = Some(vec![
        SecurityRequirement::new("bearerToken", Vec::<String>::new()),
        SecurityRequirement::new("session", Vec::<String>::new()),
        SecurityRequirement::default(),
    ]);
    for item in doc.paths.paths.values_mut() {
        let ops = [
            (&mut item.get, false),
            (&mut item.put, true),
            (&mut item.post, true),
            (&mut item.delete, true),
            (&mut item.patch, true),
        ];
        for (op, write) in ops {
            if let Some(op) = op.as_mut() {
                add_common(op, write);
            }
        }
    }
}

/// The common answers and the actor header of one operation.
fn add_common(op: &mut Operation, write: bool) {
    let has_path_param = op.parameters.iter().flatten().any(|p| matches!(p.parameter_in, ParameterIn::Path));
    // 400 for every operation: any may get a query parameter it does not declare (`query.rs`).
    let mut statuses = vec!["400", "401", "403", "500", "503"];
    if op.request_body.is_some() {
        statuses.extend(["400", "413", "415", "422"]);
    }
    if has_path_param {
        statuses.extend(["400", "404"]);
    }
    for status in statuses {
        if op.responses.responses.contains_key(status) {
            continue;
        }
        let Some((name, _, _)) = COMMON.iter().find(|(_, s, _)| *s == status) else { continue };
        op.responses.responses.insert(status.to_string(), RefOr::Ref(Ref::from_response_name(*name)));
    }
    if write {
        op.parameters.get_or_insert_with(Vec::new).push(actor_header());
    }
    // Bodies read with `ApiJsonOrEmpty`: sending none is the same as sending `{}`.
    if OPTIONAL_BODIES.contains(&op.operation_id.as_deref().unwrap_or_default()) {
        if let Some(body) = op.request_body.as_mut() {
            body.required = Some(utoipa::openapi::Required::False);
        }
    }
}

/// The operations whose body may be left out ([`crate::web::extract::ApiJsonOrEmpty`]).
const OPTIONAL_BODIES: [&str; 4] = ["cancel_spec", "cancel_execution", "pause", "resume"];

/// `X-Baton-Actor` (see [`crate::web::extract::Actor`]).
fn actor_header() -> Parameter {
    ParameterBuilder::new()
        .name("X-Baton-Actor")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Who acts in open mode (no users configured); default `api`. Ignored once users exist: \
             the actor is the credential's user. 1 to 200 bytes of UTF-8 text on one line (no control \
             characters, line separators or bidirectional overrides), else 400.",
        ))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(200))))
        .build()
}

#[cfg(test)]
mod tests {
    use super::plain_code_links;

    #[test]
    fn intra_doc_links_become_plain_code_and_real_links_stay() {
        assert_eq!(
            plain_code_links("see [`AppError`] and [`PlanStep::max_turns`]."),
            "see `AppError` and `PlanStep::max_turns`."
        );
        assert_eq!(plain_code_links("[`x`](https://e.com) [a] [`"), "[`x`](https://e.com) [a] [`");
    }

    #[test]
    fn the_served_document_has_no_intra_doc_link() {
        assert!(!super::openapi_json().contains("[`"), "an intra-doc link reached the document");
    }
}
