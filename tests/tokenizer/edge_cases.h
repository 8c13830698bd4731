// Hand-written texts for the tokenizer tests: several languages and scripts, and the inputs
// that stress a byte-level BPE and its pre-tokenizer (written for this project).
#pragma once

#include <string>
#include <vector>

namespace bgtest {

inline std::vector<std::string> multilingual_texts() {
    return {
        "The tide came in slowly over the flats, and by noon the heron had moved to the old pier.",
        "Le train de nuit part à vingt-deux heures ; n'oubliez pas vos billets, ni le thé froid.",
        "Die Brücke über den Fluss wurde 1887 gebaut und 2014 gründlich erneuert – mit Stahl statt Holz.",
        "El pequeño barco salió del puerto al amanecer, y la niña saludó desde la orilla: ¡adiós!",
        "Лодка медленно шла вдоль берега, а над водой кружили чайки. Был тихий вечер.",
        "Η βιβλιοθήκη ανοίγει στις εννέα το πρωί και κλείνει στις πέντε το απόγευμα.",
        "今天早上我们去了市场，买了新鲜的蔬菜和水果。下午下了一场大雨，街道都湿了。",
        "東京の朝は静かで、駅前のパン屋からいい香りがします。カタカナのテストもあります：コーヒー、テーブル。",
        "오늘 아침에 공원에서 산책을 했습니다. 날씨가 맑고 바람이 시원했어요.",
        "ذهبنا إلى السوق في الصباح واشترينا الخبز والزيتون والتمر.",
        "हम सुबह नदी के किनारे टहलने गए और वहाँ बहुत सारे पक्षी देखे।",
        "เมื่อวานฝนตกหนักมาก แต่วันนี้อากาศแจ่มใสและมีแดดอ่อน ๆ",
        "הספרייה נפתחת בשעה תשע בבוקר ונסגרת בחמש אחר הצהריים.",
        "Chúng tôi đã đi dạo quanh hồ vào buổi chiều, trời rất mát.",
        "Wczoraj wieczorem czytałem książkę o historii żeglugi na Bałtyku.",
        "Bugün hava çok güzel; sahilde yürüyüş yaptık ve çay içtik.",
        "Ísland er eyja í Norður-Atlantshafi; þar búa um 380 þúsund manns.",
        "Mixed 中文 and English, 日本語とEnglish, 한국어 and numbers ١٢٣ ٤٥٦ and ５６７.",
    };
}

inline std::vector<std::string> edge_case_texts() {
    return {
        "",
        " ",
        "a",
        "\n",
        "\r\n",
        "line one\r\nline two\r\n\r\nline four\r\n",
        "tabs\tand\t\ttabs\t\t\t",
        "    indented with four spaces\n        and eight\n",
        "trailing spaces   \n   \n\n\n\n   leading",
        std::string(300, ' ') + "x" + std::string(257, '\n') + "y" + std::string(100, '\t'),
        "12345678901234567890123456789012345678901234567890",
        "3.14159265358979323846264338327950288419716939937510 and 2^64 = 18446744073709551616",
        "phone +1 (555) 010-9999, room 4B, 1st, 2nd, 3rd, 1,000,000.00",
        "Emoji: 😀😃😄 👍🏽 👩‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ☕ 🏳️‍🌈",
        "Combining: e\u0301 a\u0300 o\u0308 n\u0303 \u0041\u030A\u0327 Z\u0335\u0336\u0337a\u0308\u0304lgo",
        "Zero width: a\u200Bb\u200Cc\u200Dd\u2060e and bidi \u202Eabc\u202C",
        "No-break\u00A0space, thin\u2009space, ideographic\u3000space, line\u2028separator, para\u2029sep",
        "\uFEFFstarts with a byte-order mark",
        "Special tokens in text: <｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
        "<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜><｜User｜>and 3+3?",
        "Near misses: <｜User> <|User|> <｜user｜> < ｜User｜> <｜User｜<｜User｜>>",
        "Tool markers <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜>",
        "Punctuation runs: ... !!! ??? --- ___ *** ### \"\"\" ''' ((( ))) [[[ ]]] {{{ }}} ;;; ::: ,,,",
        "Code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot\n\tif (x != y && y >= z) return -1;",
        "URLs https://example.org/path?q=1&r=two#frag and mail someone@example.com",
        "Quotes “curly” ‘single’ «guillemets» „low“ and apostrophes don't, won't, it's, we'll, they'd",
        "Math ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ ∂ ∇ ∈ ∉ ⊂ ⊃ ∩ ∪ and arrows → ← ↔ ⇒",
        "Fullwidth ＡＢＣ１２３！？ and halfwidth ｶﾀｶﾅ",
        "Invalid UTF-8: \xFF\xFE lone \x80 continuation, truncated \xE2\x82 end, overlong \xC0\xAF, surrogate \xED\xA0\x80 and \xF4\x90\x80\x80",
        "Truncated at the end \xF0\x9F\x98",
        "\xC3",
        "Mixed scripts in one word: abcдефγδε中文かなカナ한글",
        "Long word: Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
        std::string(2000, 'a'),
        std::string(1000, '=') + "\n" + std::string(600, '-'),
    };
}

}  // namespace bgtest
