/* The tool registry: which tools exist and the order they are listed to the LLM. */
#include "tools/tool.h"

#include <strings.h>

static const tool_def *const TOOLS[] = {
    &tool_def_bash,   &tool_def_bashoutput, &tool_def_killbash, &tool_def_read, &tool_def_write,
    &tool_def_edit,   &tool_def_multiedit,  &tool_def_glob,     &tool_def_grep, &tool_def_compile,
    &tool_def_verify, &tool_def_profile,    &tool_def_submit,
};

size_t tool_count(void)
{
    return sizeof TOOLS / sizeof TOOLS[0];
}

const tool_def *tool_at(size_t i)
{
    return i < tool_count() ? TOOLS[i] : NULL;
}

const tool_def *tool_find(const char *name)
{
    for (size_t i = 0; i < tool_count(); i++)
        if (strcasecmp(TOOLS[i]->name, name) == 0)
            return TOOLS[i];
    return NULL;
}
