"""The web inbox and API as one FastAPI app: `create_app(settings)`; `market-analyst serve` runs it."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from market_analyst import __version__
from market_analyst.errors import ServiceUnavailable
from market_analyst.settings import Settings
from market_analyst.web import api, pages
from market_analyst.web.actions import Refusal
from market_analyst.web.context import WebContext
from market_analyst.web.render import HERE
from market_analyst.web.security import Guard, allowed_hosts, refused_because

HEADINGS = {
    401: "Sign in first",
    403: "Not allowed",
    404: "Not found",
    409: "Already decided, or busy",
    422: "Cannot do that",
    503: "A store is unavailable",
}


# How long a client is asked to wait (Retry-After) before it asks again while a store is away: a
# balancer or a tool retries a 503 that says when, where a 500 would be taken as this server's fault.
RETRY_AFTER_SECONDS = 5


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path == "/healthz"


def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refusal)
    response = _refusal(request, exc)
    if exc.status == 503:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _refusal(request: Request, exc: Refusal) -> Response:
    if _wants_json(request):
        body = {"detail": exc.message} | ({"archive_key": exc.archive_key} if exc.archive_key else {})
        return JSONResponse(body, status_code=exc.status)
    try:
        session = request.app.state.web.sessions.read(request)
    except ServiceUnavailable:  # the sessions' store is the one away: the page says so, signed out
        session = None
    return pages.page(
        request,
        "error.html",
        session,
        status=exc.status,
        heading=HEADINGS.get(exc.status, "Refused"),
        message=exc.message,
        archive_key=exc.archive_key,
        thread_id=request.path_params.get("thread_id"),
    )


def _unavailable(request: Request, exc: Exception) -> Response:
    """A store that did not answer, wherever the request met it (the bearer-token check, the session
    cookie's record, a listing): 503 with Retry-After and the store's own sentence, never a 500."""
    return _refused(request, Refusal(503, str(exc)))


def _sign_in_first(request: Request, exc: Exception) -> Response:
    refused_because(request, "not signed in")
    if request.method == "GET":
        return RedirectResponse("/login", status_code=303)
    return _refused(request, Refusal(401, "sign in first: your session has ended or was never started"))


def _invalid(request: Request, exc: Exception) -> Response:
    """Bad input in one message: the first problem, naming the field."""
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path"))
    message = f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return _refused(request, Refusal(422, message))


def create_app(settings: Settings, *, bind: str = "127.0.0.1") -> FastAPI:
    """The app over `settings` (read once, at start), answering to the names of `bind` (the address
    listened on), loopback and `MA_ALLOWED_HOSTS`. It opens no store until a request needs one."""
    app = FastAPI(
        title="Market Analyst approval inbox",
        version=__version__,
        description=(
            "Drafts wait here for an approver's decision. Every call but /healthz needs "
            "'Authorization: Bearer <token>'; a token comes from 'market-analyst approvers add NAME'."
        ),
        docs_url=None,  # /docs is a server-rendered page: the stock one loads script from elsewhere
        redoc_url=None,
    )
    app.state.web = WebContext.create(settings)
    # "/inbox/" is a 404, not a redirect: Starlette would build its Location from the Host header.
    app.router.redirect_slashes = False
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(api.router)
    app.include_router(pages.router)
    app.add_exception_handler(Refusal, _refused)
    app.add_exception_handler(pages.SignInRequired, _sign_in_first)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(ServiceUnavailable, _unavailable)
    app.add_middleware(
        Guard,
        hosts=allowed_hosts(bind, settings.allowed_hosts),
        trusted_proxies=settings.trusted_proxies,
        debug=settings.debug,
    )
    return app
