"""Console routes. Names live in the ``webui`` namespace (``{% url 'webui:topic' name %}``)."""

from django.urls import path, register_converter

from webui.names import NameConverter
from webui.views import (
    accounts,
    acls,
    audit,
    config,
    groups,
    messages,
    overview,
    tokens,
    topics,
    trace,
    users,
)

register_converter(NameConverter, "name")

app_name = "webui"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("health/acknowledge/", overview.acknowledge, name="health-acknowledge"),
    path("login/", accounts.LoginView.as_view(), name="login"),
    path("logout/", accounts.LogoutView.as_view(), name="logout"),
    path("topics/", topics.topic_list, name="topics"),
    path("topics/new/", topics.topic_create, name="topic-new"),
    path("topics/<name:name>/", topics.topic_detail, name="topic"),
    path("topics/<name:name>/edit/", topics.topic_edit, name="topic-edit"),
    path("topics/<name:name>/delete/", topics.topic_delete, name="topic-delete"),
    path("topics/<name:name>/send/", topics.topic_send, name="topic-send"),
    path("groups/", groups.group_list, name="groups"),
    path("groups/new/", groups.group_create, name="group-new"),
    path("groups/<name:name>/", groups.group_detail, name="group"),
    path("groups/<name:name>/edit/", groups.group_edit, name="group-edit"),
    path("groups/<name:name>/delete/", groups.group_delete, name="group-delete"),
    path("groups/<name:name>/reset/", groups.group_reset, name="group-reset"),
    path("groups/<name:name>/dlq/", groups.group_dlq, name="group-dlq"),
    path("messages/", messages.message_search, name="messages"),
    path("messages/stream/", messages.message_stream, name="message-stream"),
    path("messages/<str:msg_id>/", messages.message_detail, name="message"),
    path("messages/<str:msg_id>/body/", messages.message_body, name="message-body"),
    path("trace/", trace.trace_page, name="trace"),
    path("config/", config.config_page, name="config"),
    path("config/<str:document>/download/", config.config_download, name="config-download"),
    path("audit/", audit.audit_log, name="audit"),
    path("users/", users.user_list, name="users"),
    path("users/new/", users.user_create, name="user-new"),
    path("users/<str:username>/", users.user_detail, name="user"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke, name="token-revoke"),
    path("acls/", acls.acl_list, name="acls"),
    path("acls/<int:acl_id>/delete/", acls.acl_delete, name="acl-delete"),
]
