"""Routes of ``/api/v1/`` (see README "REST API"). Paths have no trailing slash; anything
else under ``/api/v1/`` is a problem+json 404."""

from django.urls import path, re_path

from api.views import accounts, admin, config_docs, docs, groups, messages, tiered, topics, users
from api.views.fallback import not_found

app_name = "api"

urlpatterns = [
    path("topics", topics.TopicListView.as_view(), name="topic-list"),
    path("topics/<str:topic>", topics.TopicDetailView.as_view(), name="topic-detail"),
    path(
        "topics/<str:topic>/messages",
        messages.TopicMessagesView.as_view(),
        name="topic-messages",
    ),
    path("messages/<str:msg_id>", messages.MessageDetailView.as_view(), name="message-detail"),
    path("groups", groups.GroupListView.as_view(), name="group-list"),
    path("groups/<str:group>", groups.GroupDetailView.as_view(), name="group-detail"),
    path("groups/<str:group>/lag", groups.GroupLagView.as_view(), name="group-lag"),
    path("groups/<str:group>/offsets", groups.GroupOffsetsView.as_view(), name="group-offsets"),
    path(
        "groups/<str:group>/offsets/reset",
        groups.GroupResetView.as_view(),
        name="group-offsets-reset",
    ),
    path(
        "groups/<str:group>/messages/<str:msg_id>/retry",
        messages.RetryView.as_view(),
        name="message-retry",
    ),
    path(
        "groups/<str:group>/dlq/<str:msg_id>/resend",
        messages.DlqResendView.as_view(),
        name="dlq-resend",
    ),
    *[
        path(
            f"config/{document}",
            config_docs.ConfigDocumentView.as_view(document=document),
            name=f"config-{document.removesuffix('.json')}",
        )
        for document in config_docs.DOCUMENTS
    ],
    path("status", admin.StatusView.as_view(), name="status"),
    path("status/acknowledge", admin.AcknowledgeView.as_view(), name="status-acknowledge"),
    path("tiered", tiered.TieredStatusView.as_view(), name="tiered"),
    path("audit", admin.AuditView.as_view(), name="audit"),
    path("users", users.UserListView.as_view(), name="user-list"),
    path("users/<str:username>", users.UserDetailView.as_view(), name="user-detail"),
    path("users/<str:username>/unlock", accounts.UserUnlockView.as_view(), name="user-unlock"),
    path("tokens", accounts.TokenListView.as_view(), name="token-list"),
    path("tokens/<str:token_id>", accounts.TokenDetailView.as_view(), name="token-detail"),
    path("acls", accounts.AclListView.as_view(), name="acl-list"),
    path("auth/login", users.LoginView.as_view(), name="login"),
    path("auth/logout", users.LogoutView.as_view(), name="logout"),
    path("auth/me", users.MeView.as_view(), name="me"),
    path("openapi.json", docs.OpenAPIView.as_view(), name="openapi"),
    path("docs", docs.docs, name="docs"),
    re_path(r"^.*$", not_found, name="not-found"),
]
