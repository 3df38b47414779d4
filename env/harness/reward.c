/* reward: milestone, speed-up and log speed-up rewards from an evaluation's components. */
#include "harness/reward.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[] = {"milestone", "speedup", "log_speedup"};

int reward_mode_parse(const char *name, reward_mode *mode)
{
    if (!name) {
        *mode = REWARD_MILESTONE;
        return 0;
    }
    for (int i = 0; i < 3; i++)
        if (strcmp(name, NAMES[i]) == 0) {
            *mode = (reward_mode)i;
            return 0;
        }
    return -1;
}

const char *reward_mode_name(reward_mode mode)
{
    return NAMES[mode];
}

bool reward_beats(double t, double t0)
{
    return t > 0 && t0 > 0 && (t0 - t) / t0 > 0.05;
}

/* A positive time from comp, or 0 when absent/null. */
static double time_of(const json_t *comp, const char *key)
{
    const json_t *v = json_object_get(comp, key);
    return json_is_number(v) && json_number_value(v) > 0 ? json_number_value(v) : 0;
}

static bool flag(const json_t *comp, const char *key)
{
    return json_is_true(json_object_get(comp, key));
}

/* t0 / t, at most REWARD_SPEEDUP_CAP. */
static double capped_speedup(double t, double t0)
{
    return fmin(t0 / t, REWARD_SPEEDUP_CAP);
}

double reward_apply(json_t *comp, reward_mode mode)
{
    json_object_set_new(comp, "reward_mode", json_string(reward_mode_name(mode)));
    const char *status = json_string_value(json_object_get(comp, "eval_status"));
    if (!status || strcmp(status, "ok") != 0) {
        json_object_set_new(comp, "reward", json_null());
        return NAN;
    }
    bool correct = flag(comp, "compiled") && flag(comp, "correct");
    double tc = time_of(comp, "t_candidate_ms"), te = time_of(comp, "t_eager_ms"),
           tk = time_of(comp, "t_compile_ms");
    json_t *used = json_array();
    if (te > 0)
        json_array_append_new(used, json_string("eager"));
    if (tk > 0)
        json_array_append_new(used, json_string("compile"));
    json_object_set_new(comp, "baselines_used", used);
    json_object_set_new(comp, "speedup_eager", tc > 0 && te > 0 ? json_real(te / tc) : json_null());
    json_object_set_new(comp, "speedup_compile",
                        tc > 0 && tk > 0 ? json_real(tk / tc) : json_null());
    bool be = correct && reward_beats(tc, te), bk = correct && reward_beats(tc, tk);
    json_object_set_new(comp, "beats_eager", json_boolean(be));
    json_object_set_new(comp, "beats_compile", json_boolean(bk));
    bool timed = correct && tc > 0 && te > 0;
    json_object_set_new(comp, "speedup_capped",
                        json_boolean(tc > 0 && (te / tc > REWARD_SPEEDUP_CAP ||
                                                (tk > 0 && tk / tc > REWARD_SPEEDUP_CAP))));
    double r;
    switch (mode) {
    case REWARD_SPEEDUP:
        r = timed ? capped_speedup(tc, te) : 0.0;
        break;
    case REWARD_LOG_SPEEDUP:
        r = timed ? log(capped_speedup(tc, te)) : -1.0;
        break;
    default:
        r = !correct ? -1.0 : be && bk ? 3.0 : be ? 2.0 : 1.0;
        break;
    }
    json_object_set_new(comp, "reward", json_real(r));
    return r;
}

double reward_rank(const json_t *comp)
{
    const char *status = json_string_value(json_object_get(comp, "eval_status"));
    double tc = time_of(comp, "t_candidate_ms");
    if (!status || strcmp(status, "ok") != 0 || !flag(comp, "correct") || tc <= 0)
        return -INFINITY;
    double tk = time_of(comp, "t_compile_ms"), te = time_of(comp, "t_eager_ms");
    return tk > 0 ? capped_speedup(tc, tk) : te > 0 ? capped_speedup(tc, te) : -INFINITY;
}
